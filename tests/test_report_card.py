"""bench/report_card.py: each RECIPE:STEP resolves to the runner's decoding checkpoint of that
step in the work dir, and a wrong name, a data step or an untrained step is refused with the fix."""
import os
import sys

import pytest

from helpers import REPO


def refusal(tmp_path, *models) -> str:
    """The message bench/report_card.py exits with (it must refuse, never run fsd-report)."""
    sys.path.insert(0, REPO)
    from bench.report_card import main

    with pytest.raises(SystemExit) as stop:
        main(["--workdir", str(tmp_path), "--out", str(tmp_path / "r"), *models])
    assert isinstance(stop.value.code, str)
    return stop.value.code


def test_models_are_found_by_step_and_bad_ones_refused_with_the_fix(tmp_path, monkeypatch):
    sys.path.insert(0, REPO)
    from bench.report_card import checkpoint_of

    monkeypatch.chdir(REPO)  # the recipes' paths are relative to the checkout
    papers = "configs/papers.yaml"
    assert "has no step 'nope'; its steps: teacher, no-kd-2" in refusal(tmp_path, f"{papers}:teacher", f"{papers}:nope")
    assert "step 'seqkd-b8-mbr' trains no model" in refusal(tmp_path, f"{papers}:teacher",
                                                            "configs/seqkd_select.yaml:seqkd-b8-mbr")
    untrained = refusal(tmp_path, f"{papers}:teacher")
    assert "not trained in" in untrained and f"bench/run.py {papers} --workdir {tmp_path} --only teacher" in untrained
    assert "expected RECIPE:STEP" in refusal(tmp_path, "teacher", "x")
    assert "no recipe file configs/none.yaml" in refusal(tmp_path, "configs/none.yaml:teacher")
    # a trained step: the runner's exported model.pt in its run directory; a seq-KD student
    # counts as trained on the corpus its data was made from
    from bench.runner.plan import Plan
    from bench.runner.schema import load_checked

    plans = {}
    for recipe, step in ((papers, "no-kd-2"), ("configs/seqkd_select.yaml", "seq-kd-mbr-2")):
        plan = Plan(load_checked(recipe), recipe, str(tmp_path))
        checkpoint = plan.planned_record(plan.by_name[step])["checkpoint"]
        os.makedirs(os.path.dirname(checkpoint), exist_ok=True)
        open(checkpoint, "w").close()
        name, path, data = checkpoint_of(f"{recipe}:{step}", str(tmp_path), plans)
        assert (name, path, data) == (step, checkpoint, plan.data_bin)
        assert path.startswith(str(tmp_path / "runs" / f"{step}-")) and path.endswith("model.pt")
