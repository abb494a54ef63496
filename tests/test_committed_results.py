"""Every committed recipe result (bench/results/<recipe>.json) whose recipe compares against a
baseline carries its paired tests: one per baseline that is a row of the table, testing every
other row, on the scores the rows hold. A rewrite of the results from a work dir without the
rows' test-set outputs would drop them silently otherwise."""
import glob
import json
import os
import sys

import pytest

from helpers import REPO

sys.path.insert(0, REPO)
from bench.runner.config import compared_baselines, load_recipe  # noqa: E402

RESULTS = os.path.join(REPO, "bench", "results")


def recipe_results():
    """The committed results files that a recipe wrote (its config named in them)."""
    found = []
    for path in sorted(glob.glob(os.path.join(RESULTS, "*.json"))):
        with open(path, encoding="utf-8") as f:
            meta = json.load(f)
        if isinstance(meta, dict) and meta.get("config") and "rows" in meta:
            found.append((os.path.basename(path), meta))
    return found


def paired_test_gaps(meta: dict, baselines) -> list:
    """What a results file lacks of its paired tests: a baseline row without a test against it,
    a row missing from one, a tested score that is not the row's."""
    rows = {r["name"]: r for r in meta["rows"]}
    tested = {s["baseline"]: s for s in meta.get("significance", [])}
    gaps = []
    for base in baselines:
        if base not in rows:
            continue  # the table does not hold that baseline: nothing to test against
        if base not in tested:
            gaps.append(f"no paired tests against {base}")
            continue
        result = tested[base]
        skipped = set(result.get("not_tested", []))
        for name, row in rows.items():
            if name == base or name in skipped:
                continue
            scores = result["systems"].get(name)
            if scores is None:
                gaps.append(f"{name} is not tested against {base}")
            elif (scores["bleu"]["score"], scores["bleu"]["baseline"]) != (round(row["bleu"], 2),
                                                                            round(rows[base]["bleu"], 2)):
                gaps.append(f"{name} against {base}: tested BLEU {scores['bleu']['score']} against "
                            f"{scores['bleu']['baseline']}, the rows hold {row['bleu']} and {rows[base]['bleu']}")
    return gaps


def test_the_gaps_are_found_in_a_hand_made_result():
    rows = [{"name": "student", "bleu": 25.06}, {"name": "kd", "bleu": 26.43}, {"name": "other", "bleu": 20.0}]
    assert paired_test_gaps({"rows": rows}, ["student"]) == ["no paired tests against student"]
    assert paired_test_gaps({"rows": rows}, ["missing-baseline"]) == []
    tested = {"baseline": "student", "not_tested": [],
              "systems": {"kd": {"bleu": {"score": 26.43, "baseline": 25.06}},
                          "other": {"bleu": {"score": 21.0, "baseline": 25.06}}}}
    assert paired_test_gaps({"rows": rows, "significance": [tested]}, ["student"]) == [
        "other against student: tested BLEU 21.0 against 25.06, the rows hold 20.0 and 25.06"]
    del tested["systems"]["other"]
    assert paired_test_gaps({"rows": rows, "significance": [tested]}, ["student"]) == [
        "other is not tested against student"]
    tested["not_tested"] = ["other"]
    assert paired_test_gaps({"rows": rows, "significance": [tested]}, ["student"]) == []


def test_there_are_recipe_results_with_baselines():
    with_baselines = [name for name, meta in recipe_results()
                      if load_recipe(os.path.join(REPO, meta["config"])).get("compare")]
    assert {"a2d.json", "layer_kd.json", "papers.json", "readme_defaults.json"} <= set(with_baselines)


@pytest.mark.parametrize("name,meta", recipe_results(), ids=[name for name, _ in recipe_results()])
def test_every_recipe_result_with_a_baseline_carries_its_paired_tests(name, meta):
    cfg = load_recipe(os.path.join(REPO, meta["config"]))
    baselines = compared_baselines(cfg.get("compare"), cfg["steps"])
    assert paired_test_gaps(meta, baselines) == [], name
