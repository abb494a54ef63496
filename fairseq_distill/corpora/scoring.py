"""A recipe's test-set scores in both forms its table reports:

* the paper's form, where it differs from sacreBLEU on detokenised text: for IWSLT'14 (A2D's
  numbers), sacreBLEU with its default tokenizer on the protocol's tokenised, lowercased text
  after BPE removal, which is what ``fairseq-generate --scoring sacrebleu`` computes in the
  authors' test script;
* sacreBLEU with its signature, and chrF: the hypotheses Moses-detokenised (XML entities
  unescaped) against the untokenised references, case-insensitive where the protocol lowercases.

The hypotheses are those ``fsd-evaluate`` writes (subword segmentation undone, so in the
protocol's tokenised form).
"""
import os
from typing import Dict, List

from sacrebleu.metrics import BLEU, CHRF

from fairseq_distill.errors import DistillError
from fairseq_distill.text.files import read_lines

# per corpus: the target language, whether its protocol lowercases, and the paper's BLEU form
PROTOCOLS = {
    "iwslt14_de_en": {"target": "en", "lowercased": True,
                      "paper_bleu": "A2D's: sacreBLEU (default tokenizer) on the protocol's tokenised, lowercased "
                                    "text after BPE removal, as fairseq-generate --scoring sacrebleu"},
}


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
    detok = detokenize(hyps, lang)
    return {
        "paper_bleu": round(paper.corpus_score(hyps, [tokenised]).score, 2),
        "paper_bleu_form": protocol["paper_bleu"],
        "paper_bleu_signature": str(paper.get_signature()),
        "sacrebleu": round(sacre.corpus_score(detok, [original]).score, 2),
        "sacrebleu_signature": str(sacre.get_signature()),
        "chrf": round(chrf.corpus_score(detok, [original]).score, 2),
        "chrf_signature": str(chrf.get_signature()),
        "sentences": len(hyps),
    }
