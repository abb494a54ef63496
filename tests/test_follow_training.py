"""The recipes' training stages show, after each epoch, the time taken and about how long the
budget still needs (recipes/follow_training.py behind common.sh's run)."""
import os
import subprocess
import sys

import pytest

from helpers import REPO

sys.path.insert(0, os.path.join(REPO, "recipes"))

from follow_training import Budget  # noqa: E402

SUMMARY = "2026-12-02 | INFO | train | epoch {:03d} | loss 6.1 | nll_loss 5.2 | wps 900 | num_updates {} | lr 0.001\n"


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_the_estimate_is_the_mean_epoch_so_far_times_the_epochs_left():
    clock = Clock()
    budget = Budget(max_epoch=10, max_update=0, clock=clock)
    assert budget.line("| train_inner | epoch 001:     50 / 130 loss=7.1, num_updates=50\n") is None
    clock.now += 120
    assert budget.line(SUMMARY.format(1, 130)) == "epoch 1/10 done, 2m00s in this run; about 18m00s left"
    clock.now += 180  # 2 epochs in 300 s: 150 s each, 8 left
    assert budget.line(SUMMARY.format(2, 260)) == "epoch 2/10 done, 5m00s in this run; about 20m00s left"


def test_an_update_budget_and_a_resumed_run_count_only_this_runs_work():
    clock = Clock()
    # resumed at the start of epoch 5 (520 updates made before): this run's one epoch took 100 s
    budget = Budget(max_epoch=0, max_update=1300, clock=clock)
    clock.now += 100
    assert budget.line(SUMMARY.format(5, 650)) == "epoch 5, 650/1,300 updates done, 1m40s in this run; about 8m20s left"
    # both limits: the one reached first
    clock = Clock()
    budget = Budget(max_epoch=3, max_update=10_000, clock=clock)
    clock.now += 60
    assert budget.line(SUMMARY.format(1, 100)).endswith("about 2m00s left")


@pytest.mark.slow  # a bash process (about a second)
def test_run_passes_fairseq_trains_output_through_with_the_estimate_and_keeps_its_exit_status(tmp_path):
    fake = tmp_path / "fairseq-train"
    fake.write_text("#!/bin/sh\necho 'starting'\necho '" + SUMMARY.format(1, 13).strip() + "'\nexit 3\n")
    fake.chmod(0o755)
    script = (f"set -euo pipefail; source {REPO}/recipes/common.sh; DRY_RUN=0; "
              "STAGE_TAG='[student]' run fairseq-train data --max-epoch 4 --lr 0.1 || echo \"status $?\"")
    env = dict(os.environ, PATH=f"{tmp_path}{os.pathsep}{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}")
    out = subprocess.run(["bash", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env=env).stdout.splitlines()
    assert out[0].startswith("+ fairseq-train data --max-epoch 4")
    assert out[1:3] == ["starting", SUMMARY.format(1, 13).strip()]
    assert out[3].startswith("[student] epoch 1/4 done, 0s in this run; about 0s left") and out[4] == "status 3"
