"""Corpus scores and paired significance tests, computed by sacreBLEU itself.

Every score is reported with its sacreBLEU signature, so that a reader can reproduce it:
BLEU, chrF and chrF++ (chrF with word bigrams). A comparison of systems with a baseline on
the same test set uses sacreBLEU's paired bootstrap resampling (or paired approximate
randomisation): for each system and metric the p-value of "no better than the baseline",
and, for the bootstrap, the resampled mean with its 95% confidence interval.
"""
import logging
from typing import Dict, List, Sequence, Tuple

from sacrebleu.metrics import BLEU, CHRF

from fairseq_distill.errors import DistillError

METRIC_NAMES = ("bleu", "chrf", "chrf++")
TESTS = {"bootstrap": "bs", "randomization": "ar"}
SIGNIFICANCE_LEVEL = 0.05


def metrics() -> Dict[str, object]:
    """sacreBLEU's default BLEU, chrF (character 6-grams, β = 2) and chrF++ (+ word bigrams)."""
    return {"bleu": BLEU(), "chrf": CHRF(), "chrf++": CHRF(word_order=2)}


def check_lengths(references: Sequence[str], systems: Sequence[Tuple[str, Sequence[str]]]):
    for name, hyps in systems:
        if len(hyps) != len(references):
            raise DistillError(f"{name} has {len(hyps)} hypotheses but there are {len(references)} "
                               f"references: every system must translate the same test set, line by line")


def corpus_scores(hypotheses: Sequence[str], references: Sequence[str]) -> dict:
    """``{"bleu": 34.56, "chrf": ..., "chrf++": ..., "signatures": {metric: str}}``."""
    check_lengths(references, [("the system", hypotheses)])
    out, signatures = {}, {}
    for name, metric in metrics().items():
        out[name] = round(metric.corpus_score(list(hypotheses), [list(references)]).score, 2)
        signatures[name] = str(metric.get_signature())
    out["signatures"] = signatures
    return out


def is_comparison(record: dict) -> bool:
    """A record :func:`paired_significance` made (``fsd-compare --json``)."""
    return all(k in record for k in ("test", "baseline", "systems"))


def paired_significance(baseline: Tuple[str, Sequence[str]], systems: Sequence[Tuple[str, Sequence[str]]],
                        references: Sequence[str], test: str = "bootstrap", samples: int = 0) -> dict:
    """Each system against the baseline on every metric.

    Returns ``{"test", "samples", "seed", "baseline", "signatures": {metric: str},
    "systems": {name: {metric: {"score", "baseline", "delta", "p_value", "mean", "ci",
    "significant"}}}}``; ``ci`` is the half-width of the 95% interval around ``mean``
    (bootstrap only). ``significant``: p < 0.05 and a score that differs from the baseline's
    (sacreBLEU, following MultEval, gives identical outputs a tiny p: "a zero difference should
    not be attributed to chance"; it is not a difference either). ``samples`` 0: sacreBLEU's defaults (1000
    bootstrap resamples, 10000 randomisation trials); the seed is sacreBLEU's (12345, or
    ``SACREBLEU_SEED``), recorded in the signatures.
    """
    if test not in TESTS:
        raise DistillError(f"unknown significance test '{test}'; valid: {', '.join(TESTS)}")
    if not systems:
        raise DistillError("a paired test needs at least one system besides the baseline")
    names = [baseline[0]] + [name for name, _ in systems]
    if len(set(names)) != len(names):
        raise DistillError(f"system names must differ; got {names}")
    check_lengths(references, [baseline, *systems])
    from sacrebleu.significance import PairedTest

    sacre_log = logging.getLogger("sacrebleu")
    level = sacre_log.level
    sacre_log.setLevel(logging.WARNING)  # it logs every resampling step at INFO
    try:
        paired = PairedTest([(baseline[0], list(baseline[1])), *[(n, list(h)) for n, h in systems]],
                            metrics(), [list(references)], test_type=TESTS[test], n_samples=samples)
        signatures, table = paired()
    finally:
        sacre_log.setLevel(level)
    # sacreBLEU keys its output by display name (BLEU, chrF2, chrF2++), in our metrics' order
    shown = dict(zip(metrics(), [k for k in table if k != "System"]))
    out = {"test": test, "samples": paired.n_samples, "seed": paired._seed, "baseline": baseline[0],
           "signatures": {k: str(signatures[shown[k]]) for k in shown}, "systems": {},
           "baseline_scores": {key: rounded_scores(table[display][0]) for key, display in shown.items()}}
    for column, name in enumerate(table["System"][1:], start=1):
        out["systems"][name] = {}
        for key, display in shown.items():
            base, result = table[display][0], table[display][column]
            out["systems"][name][key] = {
                "score": round(float(result.score), 2),
                "baseline": round(float(base.score), 2),
                "delta": round(float(result.score) - float(base.score), 2),
                "p_value": round(float(result.p_value), 4),
                "mean": None if result.mean is None else round(float(result.mean), 2),
                "ci": None if result.ci is None else round(float(result.ci), 2),
                "significant": bool(result.p_value < SIGNIFICANCE_LEVEL and result.score != base.score),
            }
    return out


def rounded_scores(result) -> dict:
    """A sacreBLEU paired-test result's score, and its resampled mean and 95% half-width."""
    return {"score": round(float(result.score), 2),
            "mean": None if result.mean is None else round(float(result.mean), 2),
            "ci": None if result.ci is None else round(float(result.ci), 2)}


def markdown(comparison: dict) -> List[str]:
    """A table: the baseline's own scores, then one row per system, Δ and p per metric; † marks
    p ≥ 0.05 (not significant)."""
    keys = list(comparison["signatures"])
    head = "| system | " + " | ".join(f"{k} (Δ, p)" for k in keys) + " |"
    lines = [head, "|---|" + "---|" * len(keys)]
    base = comparison.get("baseline_scores")  # absent from comparisons recorded before it was kept
    if base:
        cells = [f"{base[k]['score']:.2f}" + (f" ± {base[k]['ci']:.2f}" if base[k]["ci"] is not None else "")
                 for k in keys]
        lines.append(f"| {comparison['baseline']} (baseline) | " + " | ".join(cells) + " |")
    for name, scores in comparison["systems"].items():
        cells = []
        for k in keys:
            s = scores[k]
            mark = "" if s["significant"] else " †"
            ci = f" ± {s['ci']:.2f}" if s["ci"] is not None else ""
            cells.append(f"{s['score']:.2f}{ci} ({s['delta']:+.2f}, p = {s['p_value']:.4f}){mark}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(f"Paired {comparison['test']} test against {comparison['baseline']} "
                 f"({comparison['samples']} samples, seed {comparison['seed']}); † not significant at "
                 f"p < {SIGNIFICANCE_LEVEL}. Signatures: " +
                 "; ".join(f"{k} {v}" for k, v in comparison["signatures"].items()))
    return lines
