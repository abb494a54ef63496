"""BLEU, chrF and chrF++ with their signatures, and sacreBLEU's paired significance tests."""
import json
import os
import sys

import pytest
import sacrebleu

from fairseq_distill.errors import DistillError
from fairseq_distill.evaluation.scoring import corpus_scores, markdown, paired_significance
from helpers import run

REFS = ["the cat sat on the mat", "a dog runs in the park", "hello world out there", "one two three four",
        "she reads a long book", "we walk home at night"] * 8
WORSE = ["the cat sat on a hat", "a dog walks", "hello there", "one two", "she reads", "we go home"] * 8
BETTER = ["the cat sat on the mat", "a dog runs in a park", "hello world out there", "one two three four",
          "she reads a book", "we walk home at night"] * 8


def test_corpus_scores_are_sacrebleus_with_signatures():
    scores = corpus_scores(BETTER, REFS)
    assert scores["bleu"] == round(sacrebleu.corpus_bleu(BETTER, [REFS]).score, 2)
    assert scores["chrf"] == round(sacrebleu.corpus_chrf(BETTER, [REFS]).score, 2)
    assert scores["chrf++"] == round(sacrebleu.corpus_chrf(BETTER, [REFS], word_order=2).score, 2)
    assert scores["chrf++"] != scores["chrf"]
    assert "nw:2" in scores["signatures"]["chrf++"] and "nw:0" in scores["signatures"]["chrf"]
    assert scores["signatures"]["bleu"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")


def test_a_clearly_better_system_is_significant_and_an_identical_one_is_not():
    result = paired_significance(("base", WORSE), [("better", BETTER), ("same", WORSE)], REFS)
    better, same = result["systems"]["better"], result["systems"]["same"]
    for metric in ("bleu", "chrf", "chrf++"):
        assert better[metric]["delta"] > 0 and better[metric]["p_value"] < 0.05 and better[metric]["significant"]
        assert better[metric]["ci"] is not None and better[metric]["mean"] is not None
        assert same[metric]["delta"] == 0 and not same[metric]["significant"]
    assert result["samples"] == 1000 and "bs:1000" in result["signatures"]["bleu"]
    rows = {line.split(" | ")[0]: line for line in markdown(result) if line.startswith("| ")}
    assert rows["| same"].count(" †") == 3 and " †" not in rows["| better"]  # marks: not significant
    # the baseline's own scores come first (issue 32.11), as sacreBLEU scores it
    base_bleu = round(sacrebleu.corpus_bleu(WORSE, [REFS]).score, 2)
    assert result["baseline_scores"]["bleu"]["score"] == base_bleu
    assert list(rows)[1] == "| base (baseline)" and f"{base_bleu:.2f}" in rows["| base (baseline)"]
    assert "Δ" not in rows["| base (baseline)"] and "p =" not in rows["| base (baseline)"]


def test_randomization_test_and_errors():
    result = paired_significance(("base", WORSE), [("better", BETTER)], REFS, test="randomization", samples=500)
    assert result["systems"]["better"]["bleu"]["ci"] is None and "ar:500" in result["signatures"]["bleu"]
    with pytest.raises(DistillError, match="short has 2 hypotheses but there are 48 references"):
        paired_significance(("base", WORSE), [("short", BETTER[:2])], REFS)
    with pytest.raises(DistillError, match="unknown significance test 'ttest'"):
        paired_significance(("base", WORSE), [("better", BETTER)], REFS, test="ttest")


@pytest.mark.slow
def test_fsd_compare_prints_the_table_and_writes_json(tmp_path):
    for name, lines in (("refs", REFS), ("base", WORSE), ("better", BETTER)):
        (tmp_path / f"{name}.txt").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    out = run([os.path.join(os.path.dirname(sys.executable), "fsd-compare"), "--references", str(tmp_path / "refs.txt"),
               "--baseline", f"no-kd={tmp_path / 'base.txt'}", "--system", f"kd={tmp_path / 'better.txt'}",
               "--json", str(tmp_path / "c.json")]).stdout
    row = next(line for line in out.splitlines() if line.startswith("| kd |"))
    saved = json.loads((tmp_path / "c.json").read_text())
    assert f"p = {saved['systems']['kd']['bleu']['p_value']:.4f}" in row
    assert saved["baseline"] == "no-kd"
    proc = run([os.path.join(os.path.dirname(sys.executable), "fsd-compare"), "--references", str(tmp_path / "refs.txt"),
                "--baseline", "no-kd", "--system", f"kd={tmp_path / 'better.txt'}"], check=False)
    assert proc.returncode == 2 and "'no-kd' is not NAME=FILE" in proc.stdout
