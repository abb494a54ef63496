"""Choosing one hypothesis per sentence from the teacher's n-best list, for seq-KD data.

``chrf`` keeps the hypothesis with the highest sentence-level chrF (sacreBLEU's ``CHRF``,
default parameters: character 6-grams, beta 2, no word n-grams) against the sentence's
reference, the way Mozilla's translations pipeline picks its distillation targets: the
student then learns the teacher output that is closest to the human translation.
``first`` keeps the teacher's 1-best.

Texts are compared as detokenised text (subword pieces joined back with the corpus's own
segmentation model, :meth:`fairseq_distill.text.segmentation.Segmenter.decode`), hypothesis and
reference alike; scoring the pieces themselves would count sentencepiece's ``▁`` markers
as characters.

A tie keeps the earlier, higher-ranked hypothesis. A sentence without a reference (a line of
monolingual source) keeps its 1-best.

Speed: the selection dominated the merge of n-best shards, because ``sentence_score`` extracts
the reference's n-grams again for every hypothesis. The reference is analysed once per sentence
here (through sacreBLEU's own statistics, so the scores are ``sentence_score``'s exactly), and
the sentences are split over worker processes.
"""
import os
from multiprocessing import get_all_start_methods, get_context
from typing import List, Optional, Sequence

from fairseq_distill.errors import DistillError

SELECTIONS = ("chrf", "first")


def check_selection(method: str):
    if method not in SELECTIONS:
        raise DistillError(f"unknown --select '{method}'; choose one of {', '.join(SELECTIONS)}")


def select_hypotheses(nbest: Sequence[Sequence[str]], references: Sequence[Optional[str]],
                      method: str, progress=None, workers: Optional[int] = None) -> List[int]:
    """The index of the chosen hypothesis in each sentence's n-best list (texts detokenised;
    ``references[i]`` None when sentence i has none). ``progress`` (optional) is called with
    the number of sentences done since its last call; ``workers``: processes scoring chrF
    (default: one per CPU core)."""
    check_selection(method)
    if len(nbest) != len(references):
        raise ValueError(f"{len(nbest)} n-best lists but {len(references)} references")
    chosen = [0] * len(nbest)
    if method == "first":
        return chosen
    for i, hyps in enumerate(nbest):
        if not hyps:
            raise ValueError(f"sentence {i} has an empty n-best list")
    chunks = [(nbest[start:start + CHUNK], references[start:start + CHUNK])
              for start in range(0, len(nbest), CHUNK)]
    workers = min(workers or os.cpu_count() or 1, len(chunks))
    if workers > 1 and "fork" in get_all_start_methods():
        with get_context("fork").Pool(workers) as pool:
            results = pool.imap(best_by_chrf, chunks)
            return collect(results, progress)
    return collect(map(best_by_chrf, chunks), progress)


CHUNK = 1000  # sentences a worker scores at a time (and the progress step)


def collect(results, progress) -> List[int]:
    chosen = []
    for picks in results:
        chosen += picks
        if progress is not None:
            progress(len(picks))
    return chosen


def chrf_scores(hyps: Sequence[str], ref: str, chrf=None) -> List[float]:
    """``CHRF().sentence_score(h, [ref]).score`` for each h, with the reference analysed once
    (``chrf``: a sacreBLEU ``CHRF()`` to reuse across sentences)."""
    if chrf is None:
        from sacrebleu.metrics import CHRF

        chrf = CHRF()
    try:
        cached = chrf._cache_references([[ref]])[0]
        return [chrf._compute_score_from_stats(
            chrf._compute_segment_statistics(chrf._preprocess_segment(h), cached)).score for h in hyps]
    except AttributeError:  # a sacreBLEU whose internals differ: its public (slower) way
        return [chrf.sentence_score(h, [ref]).score for h in hyps]


def best_by_chrf(chunk) -> List[int]:
    from sacrebleu.metrics import CHRF

    nbest, references = chunk
    chrf = CHRF()  # one scorer for the chunk: it holds no per-sentence state
    picks = []
    for hyps, ref in zip(nbest, references):
        best, pick = None, 0
        if ref is not None and len(hyps) > 1:
            for k, score in enumerate(chrf_scores(hyps, ref, chrf)):
                if best is None or score > best:  # strictly better: a tie keeps the earlier one
                    best, pick = score, k
        picks.append(pick)
    return picks
