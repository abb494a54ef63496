"""scripts/gpu_check.sh: without CUDA it says so and exits 0; its checks themselves run on the CPU."""
import os
import sys

import pytest

from helpers import REPO, run

SCRIPT = os.path.join(REPO, "scripts", "gpu_check.py")


@pytest.mark.slow
def test_without_cuda_it_says_so_and_exits_0():
    proc = run(["bash", os.path.join(REPO, "scripts", "gpu_check.sh")])
    assert "no CUDA device on this machine; nothing was checked" in proc.stdout
    assert "passed" not in proc.stdout


@pytest.mark.slow
def test_the_checks_run_and_report_one_line_per_case(tmp_path):
    # --jobs 2: the two cases side by side, still reported in their order
    proc = run([sys.executable, SCRIPT, "--device", "cpu", "--precisions", "fp32", "--cases", "ckd,word_kd_cached",
                "--jobs", "2", "--updates", "3", "--work", str(tmp_path)])
    lines = proc.stdout.strip().splitlines()
    assert lines[-1] == "2 passed, 0 failed"
    teacher_check = {"ckd": "teacher unchanged: yes", "word_kd_cached": "teacher not loaded: yes"}
    for case, line in zip(("ckd", "word_kd_cached"), lines[-3:-1]):
        assert line.startswith("PASS") and f"{case} fp32" in line
        for check in ("losses finite: yes", teacher_check[case], "criterion parameters saved: yes",
                      "export decodes: yes"):
            assert check in line


@pytest.mark.slow
def test_unknown_case_is_named():
    proc = run([sys.executable, SCRIPT, "--device", "cpu", "--precisions", "fp32", "--cases", "kd"], check=False)
    assert proc.returncode == 1
    assert "unknown case or precision 'kd'; cases: word_kd, word_kd_cached, pkd, ckd, alp_kd, a2d" in proc.stdout


@pytest.mark.slow
def test_jobs_below_one_is_refused():
    proc = run([sys.executable, SCRIPT, "--device", "cpu", "--precisions", "fp32", "--jobs", "0"], check=False)
    assert proc.returncode == 1
    assert "--jobs 0: give 1 or more cases to run at once" in proc.stdout
