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


def sentences(side: Side):
    """Every sentence of a binarized side, in order, read a chunk at a time."""
    for start in range(0, len(side), CHUNK):
        yield from side.read(start, start + CHUNK)


def paired_rows(original_bin: str, seqkd_bin: str, src: str, tgt: str, targets: int = 1) -> Tuple[List[str], List[str]]:
    """(seq-KD targets, their references), desegmented, one pair per row of the seq-KD data
    (``targets``: at most this many rows per source, so that a source repeated in the corpus
    moves on to its next occurrence)."""
    def side(data_bin, lang):
        return sentences(Side(data_bin, "train", src, tgt, lang))

    plain = desegmenter(original_bin)
    original = zip(side(original_bin, src), side(original_bin, tgt))
    hypotheses, references = [], []
    source_at, reference, rows_at = None, None, 0  # the original pair the last row belonged to
    for source, target in zip(side(seqkd_bin, src), side(seqkd_bin, tgt)):
        if rows_at == targets or source != source_at:  # a later sentence: the next with this source
            for source_at, reference in original:
                if source_at == source:
                    break
            else:
                raise ValueError(f"{seqkd_bin}: row {len(hypotheses)}'s source is not among {original_bin}'s "
                                 f"training sources in corpus order")
            reference, rows_at = plain(reference), 0
        rows_at += 1
        hypotheses.append(plain(target))
        references.append(reference)
    return hypotheses, references


def target_scores(original_bin: str, seqkd_bin: str, src: str, tgt: str, targets: int = 1) -> dict:
    """``{"targets_bleu", "targets_chrf", "targets_scored"}`` of the seq-KD training targets."""
    hypotheses, references = paired_rows(original_bin, seqkd_bin, src, tgt, targets)
    scores = corpus_scores(hypotheses, references)
    return {"targets_bleu": scores["bleu"], "targets_chrf": scores["chrf"], "targets_scored": len(hypotheses)}
