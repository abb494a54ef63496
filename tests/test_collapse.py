"""Collapse detection (issue 37): a layer term's loss vanishing to a few percent of its highest
is flagged; the demo-sized runs of bench/results/readme_defaults.* are the calibration: the
collapsed ckd-teacher-side row is flagged, the healthy rows are not."""
import os

import pytest

from helpers import REPO, build_trainer
from fairseq_distill.collapse import CollapseWatch, replay_log
from fairseq_distill.errors import DistillError

LOGS = os.path.join(REPO, "tests", "fixtures", "collapse_logs")  # train_inner lines of those runs


def replay(name, window=4):
    with open(os.path.join(LOGS, f"{name}.log"), encoding="utf-8") as f:
        return replay_log(f.read(), window=window)


def test_the_collapsed_run_is_flagged_and_the_healthy_ones_are_not():
    flagged = replay("ckd-teacher-side")
    assert list(flagged) == ["layer"]
    assert "the layer KD term is collapsing after 400 updates" in flagged["layer"]
    assert "--layer-project student" in flagged["layer"]
    healthy = [n[:-4] for n in os.listdir(LOGS) if n != "ckd-teacher-side.log"]
    assert {"ckd-default", "pkd-default", "student-wordkd"} <= set(healthy)
    for name in healthy:
        for window in (2, 4, 8):
            assert replay(name, window) == {}, (name, window)


def log(nll, **terms):
    return [{"nll_loss": nll, "ntokens": 1, "sample_size": 1, **{f"{t}_loss": v for t, v in terms.items()}}]


def test_the_rule_by_hand():
    """Windows of 2 updates; layer window means 4, 1, 0.3, 0.1: flagged in the 4th window, where
    0.1 <= 5% of 4, once; validation steps (no term) are ignored."""
    watch = CollapseWatch(window=2)
    for value in (4, 4, 1, 1, 0.3, 0.3):
        assert watch.observe(log(5.0, layer=value)) is None
        assert watch.observe(log(5.0)) is None  # a validation step
    assert watch.observe(log(5.0, layer=0.1)) is None
    assert "collapsing after 8 updates" in watch.observe(log(5.0, layer=0.1))
    assert watch.observe(log(5.0, layer=0.1)) is None and watch.observe(log(5.0, layer=0.1)) is None
    assert CollapseWatch(window=0).observe(log(5.0, layer=0.0)) is None  # off
    with pytest.raises(DistillError, match="--collapse-window must be >= 0"):
        CollapseWatch(window=-1)


def test_stop_on_collapse_ends_a_forced_collapse_with_the_message(tiny_data, deep_teacher, tmp_path):
    """A tiny run forced to collapse: the CKD paper's teacher-side map with a narrower student
    and a high learning rate; with --stop-on-collapse fairseq's training step ends in the
    DistillError (one line at the command line, no traceback)."""
    *_, trainer = build_trainer(tiny_data, "--task", "translation_distill", "--teacher-path", deep_teacher,
                                "--ckd-project", "teacher", "--kd-side", "both", "--collapse-window", "10",
                                "--stop-on-collapse", "--save-dir", str(tmp_path), criterion="ckd")
    task = trainer.task
    task.load_dataset("train")
    itr = task.get_batch_iterator(task.dataset("train"), max_tokens=1500, seed=1).next_epoch_itr(shuffle=True)
    batches = list(itr)
    with pytest.raises(DistillError, match=r"the ckd term is collapsing after \d+ updates.*--stop-on-collapse"):
        for update in range(300):
            trainer.train_step([batches[update % len(batches)]])
