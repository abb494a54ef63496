"""A recipe's test-set scores in both forms its table reports:

* the paper's form, where it differs from sacreBLEU on detokenised text: for IWSLT'14 (A2D's
  numbers), sacreBLEU with its default tokenizer on the protocol's tokenised, lowercased text
  after BPE removal, which is what ``fairseq-generate --scoring sacrebleu`` computes in the
  authors' test script;
* for WMT en-de (GPKD's form, and the Vaswani et al. form A2D defers to): case-sensitive
  tokenised BLEU with compound splitting, as tensor2tensor's ``get_ende_bleu.sh`` and fairseq's
  ``compound_split_bleu.sh`` compute it with ``multi-bleu.perl`` (no smoothing): both sides
  Moses-tokenised, every ``X-Y`` written ``X ##AT##-##AT## Y``;
* sacreBLEU with its signature, and chrF: the hypotheses Moses-detokenised (XML entities
  unescaped) against the untokenised references, case-insensitive where the protocol lowercases
  (where the protocol's text is not tokenised, as in ``wmt14_en_de``, the hypotheses are scored
  as they are, and Moses-tokenised for the paper's form).

The hypotheses are those ``fsd-evaluate`` writes (subword segmentation undone, so in the
protocol's tokenised form).
"""
import os
import re
from typing import Dict, List

from sacrebleu.metrics import BLEU, CHRF

from fairseq_distill.errors import DistillError
from fairseq_distill.text.files import read_lines

# per corpus: the target language, whether its protocol lowercases, and the paper's BLEU form
PROTOCOLS = {
    "iwslt14_de_en": {"target": "en", "lowercased": True,
                      "paper_bleu": "A2D's: sacreBLEU (default tokenizer) on the protocol's tokenised, lowercased "
                                    "text after BPE removal, as fairseq-generate --scoring sacrebleu"},
    # "tokenised": whether the protocol's text (so fsd-evaluate's output) is Moses-tokenised
    # (default True); "compound_split": the paper's form splits hyphenated compounds (default False)
    "wmt14_en_de": {"target": "de", "lowercased": False, "tokenised": False, "compound_split": True,
                    "paper_bleu": "Vaswani et al.'s (A2D defers to it; CKD reports sacreBLEU): case-sensitive "
                                  "tokenised BLEU with compound splitting, hypotheses and references "
                                  "Moses-tokenised, as tensor2tensor's get_ende_bleu.sh"},
    "wmt16_en_de": {"target": "de", "lowercased": False, "tokenised": True, "compound_split": True,
                    "paper_bleu": "GPKD's: case-sensitive tokenised BLEU with compound splitting on the "
                                  "protocol's Moses-tokenised text, as multi-bleu.perl after compound_split_bleu.sh"},
}

COMPOUND = re.compile(r"(\S)-(\S)")


def compound_split(lines: List[str]) -> List[str]:
    """``perl -ple 's{(\\S)-(\\S)}{$1 ##AT##-##AT## $2}g'``, match for match: matches do not
    overlap, so in ``a-b-c`` only the first hyphen is split, as in the perl one-liner."""
    return [COMPOUND.sub(r"\1 ##AT##-##AT## \2", line) for line in lines]


def detokenize(lines: List[str], lang: str) -> List[str]:
    from fairseq_distill.corpora.moses import detokenizer

    moses = detokenizer(lang)
    return [moses.detokenize(line.split(), unescape=True) for line in lines]


def recipe_scores(corpus: str, text_dir: str, hypotheses_path: str) -> Dict[str, object]:
    """Both forms of the test-set score of one system; ``text_dir``: the corpus's
    ``fsd-benchmark-corpus`` output (``test.LANG``, ``test.orig.LANG``)."""
    if corpus not in PROTOCOLS:
        raise DistillError(f"no scoring protocol for '{corpus}'; valid: {', '.join(PROTOCOLS)}")
    protocol = PROTOCOLS[corpus]
    lang = protocol["target"]
    hyps = read_lines(hypotheses_path)
    tokenised = read_lines(os.path.join(text_dir, f"test.{lang}"))
    original = read_lines(os.path.join(text_dir, f"test.orig.{lang}"))
    if not len(hyps) == len(tokenised) == len(original):
        raise DistillError(f"{hypotheses_path} has {len(hyps):,} lines; the test set has {len(tokenised):,} "
                           f"({os.path.join(text_dir, f'test.{lang}')}) and {len(original):,} untokenised")
    paper = BLEU()
    sacre = BLEU(lowercase=protocol["lowercased"])
    chrf = CHRF(lowercase=protocol["lowercased"])
    if protocol.get("tokenised", True):
        detok, paper_hyps, paper_refs = detokenize(hyps, lang), hyps, tokenised
    else:
        from fairseq_distill.corpora.moses import tokenize

        detok, paper_hyps, paper_refs = hyps, tokenize(hyps, lang), tokenize(original, lang)
    if protocol.get("compound_split", False):
        paper = BLEU(tokenize="none", smooth_method="none", force=True)  # multi-bleu.perl's form
        paper_hyps, paper_refs = compound_split(paper_hyps), compound_split(paper_refs)
    return {
        "paper_bleu": round(paper.corpus_score(paper_hyps, [paper_refs]).score, 2),
        "paper_bleu_form": protocol["paper_bleu"],
        "paper_bleu_signature": str(paper.get_signature()),
        "sacrebleu": round(sacre.corpus_score(detok, [original]).score, 2),
        "sacrebleu_signature": str(sacre.get_signature()),
        "chrf": round(chrf.corpus_score(detok, [original]).score, 2),
        "chrf_signature": str(chrf.get_signature()),
        "sentences": len(hyps),
    }


def is_scores(record: dict) -> bool:
    """A JSON record ``fsd-benchmark-score score`` wrote."""
    return all(k in record for k in ("paper_bleu", "sacrebleu", "chrf", "evaluation"))


def read_evaluation(path: str) -> dict:
    """``fsd-evaluate``'s JSON record at ``path`` (it names the hypotheses file)."""
    from fairseq_distill.workdir import read_json_record

    if not os.path.isfile(path):
        raise DistillError(f"--eval {path}: no such fsd-evaluate record (run the evaluate stage)")
    record = read_json_record(path)
    if record is None:
        raise DistillError(f"--eval {path} is not a JSON record of fsd-evaluate: give the --out of fsd-evaluate")
    if not isinstance(record.get("hypotheses"), str):
        raise DistillError(f"--eval {path} names no hypotheses file: it is not a record of fsd-evaluate; give "
                           f"the --out of fsd-evaluate")
    return record


def score_evaluation(corpus: str, text_dir: str, eval_path: str, out: str, force: bool = False) -> dict:
    """Score the hypotheses of the fsd-evaluate record ``eval_path`` (:func:`recipe_scores`) and
    write them to ``out``, which may be new or this command's earlier scores (of another
    evaluation only with ``force``); never one of the inputs or another file."""
    import json

    from fairseq_distill.workdir import check_earlier_output, check_outputs, files_written_aside

    record = read_evaluation(eval_path)
    hypotheses = record["hypotheses"]
    check_outputs([("--out", out)], [("--eval", eval_path), ("--text", text_dir),
                                     ("the hypotheses of --eval", hypotheses)])
    evaluation = os.path.abspath(eval_path)
    check_earlier_output("--out", out, [out], "fsd-benchmark-score", "the scores", is_scores,
                         lambda earlier: None if earlier["evaluation"] == evaluation
                         else f"another evaluation ({earlier['evaluation']})", force)
    scores = recipe_scores(corpus, text_dir, hypotheses)
    scores["evaluation"] = evaluation
    with files_written_aside(out) as (tmp,):
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(scores, f, indent=2)
    return scores
