"""Which layers a depth-d sub-network of an n-layer stack uses (flexible-depth models).

After Wang, Xiao and Zhu (Findings of EMNLP 2021). A stack of n layers supports the depths
that divide n; each depth d gets a fixed, sorted list of d layer indices (0-based), the same
in training and decoding. Pure Python, no fairseq: the model, the exporter and the
diagnostics command all read the same plan.

Strategies (``k = n // d`` is the chunk size of depth d):

* ``head``: layers 0 … d−1.
* ``left``: the first layer of each of the d chunks (LayerDrop's pruning rule).
* ``middle_left``: the middle layer of each chunk, the left one of two (offset (k−1)//2).
* ``seq``: depths in increasing order, each taking the next d layers after the previous
  depth's, wrapping around.
* ``optimal``: all layers start alive; repeatedly serve the largest remaining depth that the
  alive layers can serve (every chunk has an alive layer), taking in each chunk the alive
  layer nearest the chunk's middle-left layer (ties: the higher layer), then mark them dead;
  when no remaining depth can be served, every layer is alive again.
"""
import math
from typing import Dict, Iterable, List, Optional

from fairseq_distill.errors import DistillError

STRATEGIES = ("optimal", "middle_left", "left", "head", "seq")


class DepthError(ValueError):
    pass


def divisors(n: int) -> List[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def supported_depths(n: int, wanted: Optional[Iterable[int]] = None, side: str = "stack") -> List[int]:
    """The depths of an n-layer stack: all divisors, or the ``wanted`` subset of them."""
    if n < 1:
        raise DepthError(f"{side} has {n} layers; a flexible stack needs at least 1")
    valid = divisors(n)
    if wanted is None:
        return valid
    wanted = sorted(set(int(d) for d in wanted))
    bad = [d for d in wanted if d not in valid]
    if bad or not wanted:
        raise DepthError(f"{side} depth(s) {bad or wanted} not supported by {n} layers; "
                         f"the supported depths are the divisors of {n}: {valid}")
    return wanted


def parse_depths(value) -> Optional[List[int]]:
    """``"1,2,4"`` (or a list) -> [1, 2, 4]; empty/None -> None (all divisors)."""
    if value is None or value == "" or value == []:
        return None
    if isinstance(value, str):
        try:
            return [int(x) for x in value.split(",") if x.strip()]
        except ValueError:
            raise DistillError(f"depths must be comma-separated integers, got '{value}'") from None
    return [int(x) for x in value]


def subnetworks(options, side: str) -> Dict[int, List[int]]:
    """depth -> layers of one side of a model, from its options (``<side>_layers``,
    ``<side>_depths``, ``depth_strategy``): what the model builds and the exporter extracts."""
    n = getattr(options, f"{side}_layers")
    try:
        depths = supported_depths(n, parse_depths(getattr(options, f"{side}_depths", None)), side)
        return plan(n, depths, getattr(options, "depth_strategy", None) or "optimal")
    except DepthError as e:
        raise DistillError(str(e)) from None


def _chunks(n: int, d: int) -> List[range]:
    k = n // d
    return [range(c * k, (c + 1) * k) for c in range(d)]


def _middle_left(chunk: range) -> int:
    return chunk.start + (len(chunk) - 1) // 2


def plan(n: int, depths: Iterable[int], strategy: str = "optimal") -> Dict[int, List[int]]:
    """depth -> sorted 0-based layer indices, for every depth in ``depths``."""
    depths = supported_depths(n, depths)
    if strategy == "head":
        return {d: list(range(d)) for d in depths}
    if strategy == "left":
        return {d: [c.start for c in _chunks(n, d)] for d in depths}
    if strategy == "middle_left":
        return {d: [_middle_left(c) for c in _chunks(n, d)] for d in depths}
    if strategy == "seq":
        out, start = {}, 0
        for d in depths:
            out[d] = sorted((start + i) % n for i in range(d))
            start = (start + d) % n
        return out
    if strategy == "optimal":
        return _optimal(n, depths)
    raise DepthError(f"unknown depth strategy '{strategy}'; choose one of {', '.join(STRATEGIES)}")


def _optimal(n: int, depths: List[int]) -> Dict[int, List[int]]:
    alive, remaining, out = set(range(n)), set(depths), {}
    while remaining:
        servable = [d for d in remaining if all(alive.intersection(c) for c in _chunks(n, d))]
        if not servable:
            alive = set(range(n))
            continue
        d = max(servable)
        chosen = []
        for chunk in _chunks(n, d):
            target = _middle_left(chunk)
            # nearest to the middle-left layer; on a tie the higher layer (larger index)
            chosen.append(min(alive.intersection(chunk), key=lambda layer: (abs(layer - target), -layer)))
        out[d] = sorted(chosen)
        alive.difference_update(chosen)
        remaining.remove(d)
    return {d: out[d] for d in depths}


def task_balance(n: int, subnetworks: Dict[int, List[int]]) -> float:
    """Sample standard deviation over layers of how many sub-networks use each layer."""
    counts = [sum(layer in layers for layers in subnetworks.values()) for layer in range(n)]
    if n < 2:
        return 0.0
    mean = sum(counts) / n
    return math.sqrt(sum((c - mean) ** 2 for c in counts) / (n - 1))


def average_layer_distance(subnetworks: Dict[int, List[int]]) -> float:
    """Mean gap between adjacent layers of a sub-network, over all adjacent pairs of all."""
    gaps = [b - a for layers in subnetworks.values() for a, b in zip(layers, layers[1:])]
    return sum(gaps) / len(gaps) if gaps else 0.0
