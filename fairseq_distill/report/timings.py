"""What a deployment report computes from its timings: pure functions, no model.

A *round* is one timed pass of one model over the test set (or over the latency sample).
The report times every model in several rounds, the models taking turns, and keeps each
model's fastest round: a slow spell of the machine then falls on every model alike, and the
fastest round is the one least disturbed by it.
"""
import math
from typing import Dict, List, Sequence, Tuple

from fairseq_distill.errors import DistillError


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of ``values``, linear between the closest ranks (the
    sorted values sit at 0, 1/(n-1), ..., 1): for [1, 2, 3, 4], p50 = 2.5 and p95 = 3.85."""
    if not values:
        raise DistillError("a percentile needs at least one value")
    if not 0 <= q <= 100:
        raise DistillError(f"a percentile is between 0 and 100, got {q}")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def latency_summary(seconds: Sequence[float]) -> Dict[str, float]:
    """p50 and p95 of per-sentence latencies, in milliseconds."""
    return {"p50_ms": round(1000 * percentile(seconds, 50), 3),
            "p95_ms": round(1000 * percentile(seconds, 95), 3)}


def fastest_round(rounds: Sequence[dict]) -> dict:
    """The round of least ``seconds`` (the first of equals)."""
    if not rounds:
        raise DistillError("no timed round to choose from")
    return min(rounds, key=lambda r: r["seconds"])


def rates(words: int, sentences: int, seconds: float) -> Dict[str, float]:
    """Words/s and sentences/s of a pass over ``words`` source words in ``sentences`` sentences."""
    if seconds <= 0:
        raise DistillError(f"a timed pass took {seconds} s; rates need a positive time")
    return {"words_per_second": round(words / seconds, 1),
            "sentences_per_second": round(sentences / seconds, 2)}


def latency_sample(total: int, size: int) -> List[int]:
    """``size`` indices spread evenly over ``total`` sentences (index ⌊i·total/size⌋), or every
    index when ``size`` ≥ ``total``: (10, 4) -> [0, 2, 5, 7]."""
    if size < 1:
        raise DistillError(f"the latency sample needs at least 1 sentence, got {size}")
    if size >= total:
        return list(range(total))
    return [i * total // size for i in range(size)]


def pareto_front(points: Sequence[Tuple[float, float]]) -> List[int]:
    """Indices of the points (speed, quality) that no other point beats on both: none is at
    least as fast and at least as good and better on one. Ordered by speed, slowest first."""
    front = []
    for i, (speed, quality) in enumerate(points):
        dominated = any(s >= speed and q >= quality and (s > speed or q > quality)
                        for j, (s, q) in enumerate(points) if j != i)
        if not dominated:
            front.append(i)
    return sorted(front, key=lambda i: (points[i][0], -points[i][1]))


def generation_seconds(sentences: int, seconds: float, sentences_per_second: float) -> float:
    """fairseq-generate's decoding time, from its summary line, which prints the time to 0.1 s
    and sentences/s to 0.01: whichever of the two is the more precise (a short pass's time is
    mostly rounding; a long one's sentences/s may be). (40, 0.1, 412.37) -> 0.0970."""
    time_error = 0.05 / seconds if seconds > 0 else math.inf
    rate_error = 0.005 / sentences_per_second if sentences_per_second > 0 else math.inf
    if math.isinf(time_error) and math.isinf(rate_error):
        raise DistillError(f"fairseq-generate reported no decoding time for {sentences} sentences")
    return sentences / sentences_per_second if rate_error < time_error else seconds
