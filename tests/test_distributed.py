"""fairseq data-parallel training (2 CPU processes, gloo) with the distillation task."""
import os
import re
import socket
import subprocess
import sys

import pytest
import torch

from helpers import PACKAGE_DIR, REPO, TINY_MODEL, TRAIN_FLAGS

pytestmark = pytest.mark.slow  # two training processes per test


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_two_ranks(data, workdir, extra, max_update=4, timeout=600):
    """Train on 2 CPU ranks; returns (rank0 output, {rank: final student weights})."""
    os.makedirs(workdir, exist_ok=True)
    port = free_port()
    env = {**os.environ, "FSD_REPLICA_DUMP": workdir, "OMP_NUM_THREADS": "1"}
    procs = []
    for rank in range(2):
        cmd = [sys.executable, os.path.join(REPO, "tests", "ddp_worker.py"), data,
               *TRAIN_FLAGS, *TINY_MODEL, "--user-dir", PACKAGE_DIR,
               "--task", "translation_distill_replica_dump", *extra,
               "--max-update", str(max_update), "--save-dir", os.path.join(workdir, f"ckpt{rank}"),
               "--distributed-world-size", "2", "--distributed-rank", str(rank),
               "--distributed-init-method", f"tcp://127.0.0.1:{port}",
               "--distributed-backend", "gloo", "--distributed-no-spawn", "--ddp-backend", "legacy_ddp"]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, env=env, cwd=REPO))
    outputs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        outputs.append(out)
        assert p.returncode == 0, out[-4000:]
    weights = {r: torch.load(os.path.join(workdir, f"rank{r}.pt")) for r in range(2)}
    return outputs[0], weights


def assert_identical_replicas(out, weights):
    assert "distributed init (rank 0)" in out
    assert set(weights[0]) == set(weights[1])
    for key in weights[0]:
        assert torch.equal(weights[0][key], weights[1][key]), f"replicas differ in {key}"


def test_word_kd_data_parallel_replicas_identical(tiny_data, tiny_teacher, tmp_path):
    out, weights = run_two_ranks(tiny_data, str(tmp_path), [
        "--teacher-path", tiny_teacher, "--criterion", "word_kd", "--kd-weight", "0.5"])
    assert_identical_replicas(out, weights)
    assert "word_kd_loss" in out
    assert re.search(r"num_updates 4\b", out)


import pytest  # noqa: E402


@pytest.mark.parametrize("criterion,extra", [
    ("pkd", []), ("ckd", ["--ckd-combination", "oc"]), ("alp_kd", ["--alp-score", "scaled_dot"]),
])
def test_layer_kd_data_parallel_replicas_identical(tiny_data, deep_teacher, tmp_path, criterion, extra):
    out, weights = run_two_ranks(tiny_data, str(tmp_path), [
        "--teacher-path", deep_teacher, "--criterion", criterion, *extra])
    assert_identical_replicas(out, weights)
    assert f"{criterion}_loss" in out
    assert any(k.startswith(f"criterion.terms.{criterion}.fusers.") for k in weights[0])  # the projections were compared


def test_a2d_data_parallel_replicas_identical(tiny_data, deep_teacher, tmp_path):
    out, weights = run_two_ranks(tiny_data, str(tmp_path), [
        "--teacher-path", deep_teacher, "--criterion", "a2d"])
    assert_identical_replicas(out, weights)
    assert "a2d_loss" in out
    aams = {k for k in weights[0] if k.startswith("criterion.terms.a2d.aams.")}
    assert {k.split(".")[4] for k in aams} == {"encoder_self", "decoder_self", "decoder_cross"}


def test_deep_transformer_data_parallel_workers_draw_alike(tiny_data, tmp_path):
    """Group permutation and Skipping Sub-Layer draw from fairseq's seed and update number, so
    both ranks run the same layer order and skip the same sub-layers on every update."""
    import json

    out, weights = run_two_ranks(tiny_data, str(tmp_path), [
        "--arch", "deep_transformer", "--encoder-layers", "4", "--decoder-layers", "2",
        "--encoder-group-size", "2", "--decoder-group-size", "2", "--skip-sublayer-rate", "0.5",
        "--criterion", "label_smoothed_cross_entropy"], max_update=6)
    assert_identical_replicas(out, weights)
    draws = [json.load(open(tmp_path / f"draws{r}.json")) for r in range(2)]
    assert len(draws[0]) == 12 and draws[0] == draws[1]
    encoder = [tuple(order) for side, order, _ in draws[0] if side == "encoder"]
    assert len(set(encoder)) > 1  # the order does change between updates
