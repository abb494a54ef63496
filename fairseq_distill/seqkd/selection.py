"""Choosing one hypothesis per sentence from the teacher's n-best list, for seq-KD data.

``chrf`` keeps the hypothesis with the highest sentence-level chrF (sacreBLEU's ``CHRF``,
default parameters: character 6-grams, beta 2, no word n-grams) against the sentence's
reference, the way Mozilla's translations pipeline picks its distillation targets: the
student then learns the teacher output that is closest to the human translation.
``first`` keeps the teacher's 1-best. ``mbr`` needs no reference: it keeps the hypothesis of
highest expected sentence chrF against the other hypotheses of the list (minimum Bayes risk,
:mod:`fairseq_distill.seqkd.mbr`); :func:`rank_by_mbr` orders the whole list that way, for
``--targets K``.

Texts are compared as detokenised text (subword pieces joined back with the corpus's own
segmentation model, :meth:`fairseq_distill.text.segmentation.Segmenter.decode`), hypothesis and
reference alike; scoring the pieces themselves would count sentencepiece's ``▁`` markers
as characters.

A tie keeps the earlier, higher-ranked hypothesis. Under ``chrf`` a sentence without a reference
(a line of monolingual source) keeps its 1-best; ``mbr`` treats every sentence alike.

Speed: the selection dominates the merge of n-best shards. ``sentence_score`` extracts the
reference's n-grams again for every hypothesis; here every text's character n-grams are counted
once, for a batch of sentences at a time, with MBR's arithmetic (:mod:`fairseq_distill.seqkd.mbr`,
the reference taken as one more candidate, so the scores are ``sentence_score``'s exactly), and
the sentences are split over worker processes.
"""
import os
from collections import deque
from multiprocessing import get_all_start_methods, get_context
from typing import Iterable, Iterator, List, Optional, Sequence

from fairseq_distill.errors import DistillError

SELECTIONS = ("chrf", "first", "mbr")


def check_selection(method: str, targets: Optional[int] = None):
    """``--select`` is known, and ``--targets`` (several targets per source) goes with mbr only."""
    if method not in SELECTIONS:
        raise DistillError(f"unknown --select '{method}'; choose one of {', '.join(SELECTIONS)}")
    if targets is not None and method != "mbr":
        raise DistillError(f"--targets applies to --select mbr only (the K hypotheses of highest expected "
                           f"utility, each a training pair); --select {method} keeps one hypothesis per sentence: "
                           f"drop --targets, or pass --select mbr")
    if targets is not None and targets < 1:
        raise DistillError(f"--targets must be at least 1, got {targets}")


def select_hypotheses(nbest: Sequence[Sequence[str]], references: Sequence[Optional[str]],
                      method: str, progress=None, workers: Optional[int] = None, pool=None) -> List[int]:
    """The index of the chosen hypothesis in each sentence's n-best list (texts detokenised;
    ``references[i]`` None when sentence i has none). ``progress`` (optional) is called with
    the number of sentences done since its last call; ``workers``: processes scoring chrF
    (default: one per CPU core), or ``pool``: worker processes to score on (:func:`chrf_pool`;
    a caller selecting chunk after chunk starts them once)."""
    check_selection(method)
    if len(nbest) != len(references):
        raise ValueError(f"{len(nbest)} n-best lists but {len(references)} references")
    chosen = [0] * len(nbest)
    if method == "first":
        return chosen
    if method == "mbr":
        return [ranking[0] if ranking else 0 for ranking, _ in rank_by_mbr(nbest, progress, workers)]
    for i, hyps in enumerate(nbest):
        if not hyps:
            raise ValueError(f"sentence {i} has an empty n-best list")
    chunks = [(nbest[start:start + CHUNK], references[start:start + CHUNK])
              for start in range(0, len(nbest), CHUNK)]
    if pool is not None:
        return collect(pool.imap(best_by_chrf, chunks), progress)
    workers = min(workers or os.cpu_count() or 1, len(chunks))
    if workers > 1 and "fork" in get_all_start_methods():
        with get_context("fork").Pool(workers) as pool:
            results = pool.imap(best_by_chrf, chunks)
            return collect(results, progress)
    return collect(map(best_by_chrf, chunks), progress)


CHUNK = 1000  # sentences a worker scores at a time (and the progress step)


def chrf_pool(workers: Optional[int] = None):
    """Worker processes for :func:`select_hypotheses` (default: one per CPU this process may run
    on), or None where one process does (a single core, or no fork): to be closed by the caller."""
    workers = worker_count(workers, None)
    if workers > 1 and "fork" in get_all_start_methods():
        return get_context("fork").Pool(workers)
    return None


def worker_count(workers: Optional[int], chunks: Optional[int]) -> int:
    """``workers``, or one per CPU this process may run on, and no more than there are chunks."""
    if not workers:
        from fairseq_distill.machine import usable_cores

        workers = usable_cores()
    return max(1, workers if chunks is None else min(workers, chunks))


def rank_by_mbr(nbest: Sequence[Sequence[str]], progress=None, workers: Optional[int] = None):
    """Each list's hypotheses ordered by MBR score, best first, and their scores in the list's own
    order (:func:`fairseq_distill.seqkd.mbr.rank`)."""
    chunks = [nbest[start:start + CHUNK] for start in range(0, len(nbest), CHUNK)]
    return collect(mbr_chunks(chunks, worker_count(workers, len(chunks))), progress)


def mbr_chunks(chunks: Iterable[Sequence[Sequence[str]]], workers: Optional[int] = None) -> Iterator[list]:
    """:func:`fairseq_distill.seqkd.mbr.rank` of each chunk of n-best lists, in order, the chunks
    split over worker processes (default: one per CPU this process may use). The chunks are read
    as the workers need them, a few ahead, so a generator keeps memory bounded."""
    from fairseq_distill.seqkd.mbr import rank

    workers = worker_count(workers, None)
    if workers == 1 or "fork" not in get_all_start_methods():
        yield from map(rank, chunks)
        return
    with get_context("fork").Pool(workers) as pool:
        pending = deque()
        for chunk in chunks:
            pending.append(pool.apply_async(rank, (chunk,)))
            if len(pending) > 2 * workers:
                yield pending.popleft().get()
        while pending:
            yield pending.popleft().get()


def collect(results, progress) -> list:
    chosen = []
    for picks in results:
        chosen += picks
        if progress is not None:
            progress(len(picks))
    return chosen


def chrf_scores(hyps: Sequence[str], ref: str) -> List[float]:
    """``CHRF().sentence_score(h, [ref]).score`` for each h."""
    return reference_chrf([hyps], [ref])[0]


def reference_chrf(nbest: Sequence[Sequence[str]], references: Sequence[str]) -> List[List[float]]:
    """Each list's sentence chrF against its reference: the reference joins the list as one more
    candidate, and its column of the list's chrF matrix (:func:`fairseq_distill.seqkd.mbr.utility_matrices`,
    every text's character n-grams counted once, a batch of sentences at a time) holds the scores,
    sacreBLEU's floats exactly."""
    from fairseq_distill.seqkd.mbr import utility_matrices

    matrices = utility_matrices([list(hyps) + [ref] for hyps, ref in zip(nbest, references)])
    return [matrix[:len(hyps), len(hyps)].tolist() for hyps, matrix in zip(nbest, matrices)]


def best_by_chrf(chunk) -> List[int]:
    nbest, references = chunk
    picks = [0] * len(nbest)
    scored = [i for i, (hyps, ref) in enumerate(zip(nbest, references)) if ref is not None and len(hyps) > 1]
    for i, scores in zip(scored, reference_chrf([nbest[i] for i in scored], [references[i] for i in scored])):
        best = None
        for k, score in enumerate(scores):
            if best is None or score > best:  # strictly better: a tie keeps the earlier one
                best, picks[i] = score, k
    return picks
