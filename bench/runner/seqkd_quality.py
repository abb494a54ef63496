"""How close a seq-KD data set's targets lie to the references they stand in for: corpus BLEU and
chrF of its training targets against the original training targets, both with their subword
segmentation removed (fairseq's own ``post_process``, the segmentation the data record).

A data set made with ``--targets K`` repeats each source once per target: each row is scored
against the reference of its source, found by walking both corpora in order (the seq-KD data keep
corpus order; rows its length-ratio filter dropped are skipped over). Text the recipe tokenised
before segmenting (Moses) stays tokenised on both sides: the scores compare data sets with each
other, not with published figures."""
from typing import List, Tuple

from fairseq.data.data_utils import post_process

from fairseq_distill.evaluation.evaluate import POST_PROCESS
from fairseq_distill.evaluation.scoring import corpus_scores
from fairseq_distill.seqkd.inputs import Side
from fairseq_distill.text.segmentation import load_meta

CHUNK = 20_000


def desegmenter(data_bin: str):
    meta = load_meta(data_bin) or {}
    symbol = POST_PROCESS.get(meta.get("bpe"))
    if symbol is None:
        return lambda line: line
    return lambda line: post_process(line, symbol)


def paired_rows(original_bin: str, seqkd_bin: str, src: str, tgt: str, targets: int = 1) -> Tuple[List[str], List[str]]:
    """(seq-KD targets, their references), desegmented, one pair per row of the seq-KD data
    (``targets``: at most this many rows per source, so that a source repeated in the corpus
    moves on to its next occurrence)."""
    old_src, old_tgt = Side(original_bin, "train", src, tgt, src), Side(original_bin, "train", src, tgt, tgt)
    new_src, new_tgt = Side(seqkd_bin, "train", src, tgt, src), Side(seqkd_bin, "train", src, tgt, tgt)
    plain = desegmenter(original_bin)
    hypotheses, references = [], []
    at, rows_at = -1, 0  # the original sentence the last seq-KD row belonged to, and its rows so far
    old_sources: List[str] = []
    old_start = 0

    def old_source(i: int) -> str:
        nonlocal old_sources, old_start
        if not old_start <= i < old_start + len(old_sources):
            old_start, old_sources = i, old_src.read(i, i + CHUNK)
        return old_sources[i - old_start]

    for start in range(0, len(new_src), CHUNK):
        for source, target in zip(new_src.read(start, start + CHUNK), new_tgt.read(start, start + CHUNK)):
            # the same source again (another target of the same sentence) or a later one
            if at < 0 or rows_at == targets or old_source(at) != source:
                at, rows_at = at + 1, 0
                while at < len(old_src) and old_source(at) != source:
                    at += 1
                if at >= len(old_src):
                    raise ValueError(f"{seqkd_bin}: row {len(hypotheses)}'s source is not among {original_bin}'s "
                                     f"training sources in corpus order")
            rows_at += 1
            hypotheses.append(plain(target))
            references.append(plain(old_tgt[at]))
    return hypotheses, references


def target_scores(original_bin: str, seqkd_bin: str, src: str, tgt: str, targets: int = 1) -> dict:
    """``{"targets_bleu", "targets_chrf", "targets_scored"}`` of the seq-KD training targets."""
    hypotheses, references = paired_rows(original_bin, seqkd_bin, src, tgt, targets)
    scores = corpus_scores(hypotheses, references)
    return {"targets_bleu": scores["bleu"], "targets_chrf": scores["chrf"], "targets_scored": len(hypotheses)}
