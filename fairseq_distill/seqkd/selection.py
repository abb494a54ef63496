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
"""
from typing import List, Optional, Sequence

from fairseq_distill.errors import DistillError

SELECTIONS = ("chrf", "first")


def check_selection(method: str):
    if method not in SELECTIONS:
        raise DistillError(f"unknown --select '{method}'; choose one of {', '.join(SELECTIONS)}")


def select_hypotheses(nbest: Sequence[Sequence[str]], references: Sequence[Optional[str]],
                      method: str, progress=None) -> List[int]:
    """The index of the chosen hypothesis in each sentence's n-best list (texts detokenised;
    ``references[i]`` None when sentence i has none). ``progress`` (optional) is called with
    the number of sentences done since its last call."""
    check_selection(method)
    if len(nbest) != len(references):
        raise ValueError(f"{len(nbest)} n-best lists but {len(references)} references")
    chosen = [0] * len(nbest)
    if method == "first":
        return chosen
    from sacrebleu.metrics import CHRF

    chrf = CHRF()
    for i, (hyps, ref) in enumerate(zip(nbest, references)):
        if not hyps:
            raise ValueError(f"sentence {i} has an empty n-best list")
        if ref is not None and len(hyps) > 1:
            best = None
            for k, hyp in enumerate(hyps):
                score = chrf.sentence_score(hyp, [ref]).score
                if best is None or score > best:  # strictly better: a tie keeps the earlier one
                    best, chosen[i] = score, k
        if progress is not None and (i + 1) % 1000 == 0:
            progress(1000)
    if progress is not None:
        progress(len(nbest) % 1000)
    return chosen
