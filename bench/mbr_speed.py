"""How fast ``fsd-seqkd --select mbr`` ranks n-best lists: sentences per second at N hypotheses.

    taskset -c 1 .venv/bin/python bench/mbr_speed.py [--sentences 20000] [--nbest 8] [--repeats 3] \
        [--workers K] [--note "..."]

Synthetic n-best lists shaped like a teacher's: a source sentence of about 25 words drawn from a
Zipf-distributed vocabulary of words of natural lengths (capitals, umlauts, punctuation), and N
distinct hypotheses, each zero to three word edits away from a shared translation (a word replaced,
dropped, inserted, two neighbours swapped, the final punctuation changed), so that they share most
character n-grams as a beam's hypotheses do. Measured: the ranking itself
(:func:`fairseq_distill.seqkd.mbr.rank`, in this process: utility matrices, MBR scores, order) in
wall-clock and CPU seconds, best of ``--repeats``; then the same lists through
:func:`fairseq_distill.seqkd.selection.rank_by_mbr` with ``--workers`` processes (default: the cores
this process may use); and a shard's whole path in one process: the shard file read
(:func:`fairseq_distill.seqkd.decode.read_shard`), ranked and its rankings file written
(:func:`fairseq_distill.seqkd.mbr_shards.rank_shard`; the hypotheses stand as whole words for
subword pieces, so detokenising is a join). A sample of the lists is checked against sacreBLEU's
``sentence_score`` pair by pair first. Writes ``bench/results/mbr_speed.{json,md}`` with the machine named and
the time 4.5M sentences take at the measured rates.
"""
import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from types import SimpleNamespace

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from fairseq_distill.machine import cpu_model, usable_cores  # noqa: E402
from fairseq_distill.seqkd import mbr  # noqa: E402
from fairseq_distill.seqkd.decode import read_shard, write_shard  # noqa: E402
from fairseq_distill.seqkd.mbr_shards import rank_shard, rankings_path  # noqa: E402
from fairseq_distill.seqkd.selection import rank_by_mbr  # noqa: E402

LETTERS = "eeeeennnnniiiirrrrsssttttaaaddhhuullggccmmoobbwwffkkzzpvjyxqäöüß"
CORPUS_SIZE = 4_500_000  # the corpus size the extrapolation is for


def vocabulary(rng: random.Random, size: int = 20000):
    """Words of 1 to 14 letters (mean about 6), some capitalised."""
    words = []
    for _ in range(size):
        length = min(14, max(1, int(rng.gauss(6, 2.5))))
        word = "".join(rng.choice(LETTERS) for _ in range(length))
        words.append(word.capitalize() if rng.random() < 0.3 else word)
    return words


def nbest_list(rng: random.Random, words, weights, size: int, length: int = 25):
    """``size`` distinct hypotheses a few word edits from one shared translation."""
    base = rng.choices(words, weights, k=max(5, int(rng.gauss(length, 5))))
    hyps, tries = [], 0
    while len(hyps) < size:
        h = list(base)
        for _ in range(rng.randint(0, 3) if hyps else 0):  # the first is the shared translation
            k, op = rng.randrange(len(h)), rng.random()
            if op < 0.4:
                h[k] = rng.choices(words, weights)[0]
            elif op < 0.6 and len(h) > 5:
                del h[k]
            elif op < 0.8:
                h.insert(k, rng.choices(words, weights)[0])
            elif k + 1 < len(h):
                h[k], h[k + 1] = h[k + 1], h[k]
        text = " ".join(h) + rng.choice([".", ".", ".", "!", " ."])
        tries += 1
        if text not in hyps or tries > 100:
            hyps.append(text)
    return hyps


def synthetic_lists(sentences: int, size: int, seed: int = 1):
    rng = random.Random(seed)
    words = vocabulary(rng)
    weights = [1 / (rank + 1) for rank in range(len(words))]  # Zipf
    return [nbest_list(rng, words, weights, size) for _ in range(sentences)]


def check_against_sacrebleu(lists, count: int = 50) -> int:
    """The utility of every pair of the first ``count`` lists equals sacreBLEU's sentence chrF."""
    from sacrebleu.metrics import CHRF

    chrf = CHRF()
    for hyps, u in zip(lists[:count], mbr.utility_matrices(lists[:count])):
        for i, h in enumerate(hyps):
            for j, r in enumerate(hyps):
                if u[i, j] != chrf.sentence_score(h, [r]).score:
                    sys.exit(f"mbr_speed: the utility of {h!r} against {r!r} is {u[i, j]}, sacreBLEU's "
                             f"{chrf.sentence_score(h, [r]).score}")
    return sum(len(h) ** 2 for h in lists[:count])


def timed(fn, repeats: int):
    """The best wall-clock and the best CPU seconds (this process and its workers) of ``repeats`` runs."""
    walls, cpus = [], []
    for _ in range(repeats):
        before, cpu_before = time.perf_counter(), os.times()
        fn()
        cpu_after = os.times()
        walls.append(time.perf_counter() - before)
        cpus.append(sum(a - b for a, b in zip(cpu_after[:4], cpu_before[:4])))
    return min(walls), min(cpus), walls


class Words:
    """Stands for the corpus's segmenter: the shard's "pieces" are whole words."""
    @staticmethod
    def decode(pieces):
        return " ".join(pieces)


def shard_path_run(lists, workers: int):
    """A shard file of ``lists`` read, ranked and its rankings written, in a scratch directory."""
    work = tempfile.mkdtemp(prefix="mbr_speed_")
    try:
        write_shard(work, 0, 1, {"nbest": len(lists[0])}, {},
                    ({"id": i, "hyp": hyps[0], "nbest": hyps} for i, hyps in enumerate(lists)))
        args = SimpleNamespace(work=work, num_shards=1)

        def run():
            if os.path.exists(rankings_path(work, 0, 1)):
                os.remove(rankings_path(work, 0, 1))
            _, found, digest = read_shard(os.path.join(work, "shard0-of-1.jsonl"))
            rank_shard(args, 0, found, sorted(found), digest, Words, workers=workers)
        return run, work
    except Exception:
        shutil.rmtree(work)
        raise


def hours(rate: float) -> float:
    return round(CORPUS_SIZE / rate / 3600, 2)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.strip().split("\n")[0])
    p.add_argument("--sentences", type=int, default=20000)
    p.add_argument("--nbest", type=int, default=8)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--workers", type=int, default=None, help="processes for the second measurement "
                   "(default: the cores this process may use)")
    p.add_argument("--note", default="", help="what else the machine was doing, for the record")
    p.add_argument("--results", default=os.path.join(REPO, "bench", "results"))
    args = p.parse_args(argv)

    lists = synthetic_lists(args.sentences, args.nbest)
    checked = check_against_sacrebleu(lists)
    words = [len(h.split()) for hyps in lists for h in hyps]
    chars = [len(h) for hyps in lists for h in hyps]
    one_wall, one_cpu, one_runs = timed(lambda: mbr.rank(lists), args.repeats)
    workers = args.workers or usable_cores()
    many_wall, many_cpu, many_runs = timed(lambda: rank_by_mbr(lists, workers=workers), args.repeats)
    run_shard, scratch = shard_path_run(lists, 1)
    try:
        shard_wall, shard_cpu, shard_runs = timed(run_shard, args.repeats)
    finally:
        shutil.rmtree(scratch)
    one_rate = args.sentences / one_wall
    record = {
        "machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "usable_cores": usable_cores(),
                    "affinity": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
                    "load_average_1min_at_end": round(os.getloadavg()[0], 2), "note": args.note},
        "lists": {"sentences": args.sentences, "hypotheses_each": args.nbest,
                  "words_per_hypothesis": round(sum(words) / len(words), 1),
                  "characters_per_hypothesis": round(sum(chars) / len(chars), 1),
                  "distinct_per_list": round(sum(len(set(h)) for h in lists) / len(lists), 2)},
        "checked_against_sacrebleu_pairs": checked,
        "one_process": {"wall_seconds": round(one_wall, 2), "cpu_seconds": round(one_cpu, 2),
                        "sentences_per_second_wall": round(one_rate), "wall_seconds_each_run": [round(w, 2) for w in one_runs],
                        "sentences_per_second_cpu": round(args.sentences / one_cpu)},
        "workers": {"processes": workers, "wall_seconds": round(many_wall, 2), "cpu_seconds": round(many_cpu, 2),
                    "sentences_per_second_wall": round(args.sentences / many_wall),
                    "wall_seconds_each_run": [round(w, 2) for w in many_runs]},
        "shard_path": {"processes": 1, "wall_seconds": round(shard_wall, 2), "cpu_seconds": round(shard_cpu, 2),
                       "sentences_per_second_wall": round(args.sentences / shard_wall),
                       "wall_seconds_each_run": [round(w, 2) for w in shard_runs]},
        "extrapolation": {"sentences": CORPUS_SIZE, "hours_one_core_at_wall_rate": hours(one_rate),
                          "hours_two_cores_at_twice_the_wall_rate": hours(2 * one_rate),
                          "hours_at_workers_rate": hours(args.sentences / many_wall),
                          "hours_shard_path_one_core": hours(args.sentences / shard_wall)},
        "repeats": args.repeats,
    }
    os.makedirs(args.results, exist_ok=True)
    stem = os.path.join(args.results, "mbr_speed")
    with open(stem + ".json", "w") as f:
        json.dump(record, f, indent=2)
    with open(stem + ".md", "w") as f:
        f.write(markdown(record))
    print(markdown(record))


def markdown(r: dict) -> str:
    m, lists, one, many, ex = r["machine"], r["lists"], r["one_process"], r["workers"], r["extrapolation"]
    shard = r["shard_path"]
    return f"""# MBR selection speed (`bench/mbr_speed.py`)

`fsd-seqkd --select mbr`'s ranking of synthetic n-best lists: {lists['sentences']:,} sentences of
{lists['hypotheses_each']} distinct hypotheses each ({lists['words_per_hypothesis']} words,
{lists['characters_per_hypothesis']} characters a hypothesis on average; each a few word edits from a shared
translation). Utility: sentence chrF, equal to sacreBLEU's `sentence_score` on all
{r['checked_against_sacrebleu_pairs']:,} pairs of the first 50 lists. Best of {r['repeats']} runs (wall and CPU
time each the best of its own).

Machine: {m['cpu']}, {m['cores']} cores; this process could use {m['usable_cores']} (CPUs {m['affinity']}).
{m['note']}

| measured | processes | wall s | CPU s | sentences/s (wall) | 4.5M sentences |
|---|---|---|---|---|---|
| `mbr.rank` in one process | 1 | {one['wall_seconds']} | {one['cpu_seconds']} | {one['sentences_per_second_wall']:,} | {ex['hours_one_core_at_wall_rate']} h |
| `rank_by_mbr` (chunks over worker processes) | {many['processes']} | {many['wall_seconds']} | {many['cpu_seconds']} | {many['sentences_per_second_wall']:,} | {ex['hours_at_workers_rate']} h |
| a shard's whole path: read, ranked, rankings written | {shard['processes']} | {shard['wall_seconds']} | {shard['cpu_seconds']} | {shard['sentences_per_second_wall']:,} | {ex['hours_shard_path_one_core']} h |

On two free cores, two worker processes (independent chunks of 1,000 sentences) would rank at
up to twice the one-process rate, {2 * one['sentences_per_second_wall']:,} sentences/s, i.e.
{ex['hours_two_cores_at_twice_the_wall_rate']} h for 4.5M sentences (an extrapolation, not measured here). CPU time
alone: {one['sentences_per_second_cpu']:,} sentences/s a core.
"""


if __name__ == "__main__":
    main()
