"""fairseq data-parallel training (2 CPU processes, gloo) with the distillation task: ranks
started one by one on this machine, and two nodes started by torchrun as two machines would be;
sequence-level KD decoded in shards on two "machines" and merged on one."""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time

import pytest
import torch

from helpers import PACKAGE_DIR, REPO, TINY_MODEL, TRAIN_FLAGS, python_module, run

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


# -- more than one machine: torchrun, two nodes of one process each ----------------------------

def start_nodes(argv_of_rank, env, nodes=2):
    """``nodes`` torchrun agents on 127.0.0.1, one process each, as separate machines would start
    them (``python -m torch.distributed.run`` is the ``torchrun`` command); the command of node R
    is ``argv_of_rank(R)``. Returns each node's output; a node that fails stops the others."""
    port = free_port()
    procs = []
    for rank in range(nodes):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nodes), "--node-rank", str(rank),
               "--nproc-per-node", "1", "--master-addr", "127.0.0.1", "--master-port", str(port),
               *argv_of_rank(rank)]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                      env=env, cwd=REPO, start_new_session=True))
    deadline = time.monotonic() + 600
    while any(p.poll() is None for p in procs):
        failed = any(p.returncode not in (None, 0) for p in procs)
        if failed or time.monotonic() > deadline:
            for p in procs:
                if p.poll() is None:
                    os.killpg(p.pid, 9)  # the agent and the worker it started
            break
        time.sleep(0.2)
    outputs = [p.communicate()[0] for p in procs]
    for p, out in zip(procs, outputs):
        assert p.returncode == 0, "\n".join(o[-3000:] for o in outputs)
    return outputs


def node_training_argv(data, workdir, extra, max_update):
    """ddp_worker.py's fairseq-train arguments for node R: torchrun gives the address (env://);
    on CPUs fairseq needs the rank and world size spelled out (docs/training.md)."""
    def argv(rank):
        return [os.path.join(REPO, "tests", "ddp_worker.py"), data, *TRAIN_FLAGS, *TINY_MODEL,
                "--user-dir", PACKAGE_DIR, "--task", "translation_distill_replica_dump", "--dropout", "0",
                *extra, "--max-update", str(max_update), "--save-dir", os.path.join(workdir, f"ckpt{rank}"),
                "--distributed-world-size", "2", "--distributed-rank", str(rank),
                "--distributed-init-method", "env://", "--distributed-no-spawn",
                "--distributed-backend", "gloo", "--ddp-backend", "legacy_ddp"]
    return argv


def dump_env(workdir):
    os.makedirs(workdir, exist_ok=True)
    return {**os.environ, "FSD_REPLICA_DUMP": workdir, "OMP_NUM_THREADS": "1"}


def train_on_two_nodes(data, workdir, extra, max_update):
    """(rank 0's output, {rank: final weights}) of a two-node torchrun training run."""
    outputs = start_nodes(node_training_argv(data, workdir, extra, max_update), dump_env(workdir))
    return outputs[0], {r: torch.load(os.path.join(workdir, f"rank{r}.pt")) for r in range(2)}


def train_in_one_process(data, workdir, extra, max_update, update_freq):
    """(output, final weights) of the same training in one process, without torch.distributed."""
    cmd = [sys.executable, os.path.join(REPO, "tests", "ddp_worker.py"), data, *TRAIN_FLAGS, *TINY_MODEL,
           "--user-dir", PACKAGE_DIR, "--task", "translation_distill_replica_dump", "--dropout", "0", *extra,
           "--max-update", str(max_update), "--update-freq", str(update_freq),
           "--save-dir", os.path.join(workdir, "ckpt")]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=dump_env(workdir), cwd=REPO, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:]
    return proc.stdout, torch.load(os.path.join(workdir, "rank0.pt"))


def logged_updates(out):
    """{update: (loss, words per batch, sentences per batch)} from fairseq-train's train_inner lines."""
    found = {}
    for line in out.splitlines():
        m = re.search(r"train_inner\b.* loss=([\d.]+),.* wpb=(\d+), bsz=(\d+),.* num_updates=(\d+),", line)
        if m:
            found[int(m.group(4))] = (float(m.group(1)), int(m.group(2)), int(m.group(3)))
    return found


def max_difference(a, b):
    assert set(a) == set(b)
    return max((a[k].double() - b[k].double()).abs().max().item() for k in a)


# Two nodes of one process each, one batch per node and update, against one process that
# accumulates the same two batches per update (--update-freq 2). fairseq deals the shuffled batches
# out to the ranks (rank r takes batches r, r + 2, ...) as --update-freq 2 groups them, so both runs
# see the same batches in each update (the logged words and sentences per update say so); it seeds
# every update alike, and dropout is off (a second rank restarts the random stream where a second
# accumulated batch continues it: the one thing fairseq does not promise to match). Each batch's
# gradient is then computed alike, and the two are summed (exactly, in either order) by the
# all-reduce or by accumulation; the nodes halve each before the all-reduce and multiply the sum
# by 2 / summed sample size, one process multiplies it by 1 / sample size: with a world size of 2
# the scalings differ by powers of two only, which float32 applies exactly. So the trained weights
# are equal bit for bit, not within a tolerance, and the logged losses alike; any difference means
# the runs combined other batches or gradients. A run that batches differently (--update-freq 1)
# ends elsewhere (the control).
UPDATES = 3


def assert_two_nodes_match_one_process(two_out, two, one_out, one):
    assert "distributed init (rank 0): env://" in two_out
    for key in two[0]:
        assert torch.equal(two[0][key], two[1][key]), f"the nodes' replicas differ in {key}"
    nodes, single = logged_updates(two_out), logged_updates(one_out)
    assert sorted(nodes) == sorted(single) == list(range(1, UPDATES + 1))
    assert nodes == single  # per update: loss, words and sentences
    assert max_difference(two[0], one) == 0.0


def second_machine(root, data, teacher):
    """(data, teacher) as another machine holds them: its own copies at other paths, the
    teacher under the same file name."""
    shutil.copytree(data, root / "data-bin")
    (root / "teacher").mkdir()
    shutil.copy(teacher, root / "teacher")
    return str(root / "data-bin"), str(root / "teacher" / os.path.basename(teacher))


def side_by_side(commands):
    """Run the commands at once, as separate machines would; each must succeed."""
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO)
             for cmd in commands]
    for proc in procs:
        out = proc.communicate(timeout=600)[0]
        assert proc.returncode == 0, out[-3000:]


def cache_made_on_two_machines(data, teacher, tmp_path):
    """fsd-cache-teacher's two shards made on two "machines", merged on the first: the cache."""
    machine = [tmp_path / "machine0", tmp_path / "machine1"]
    places = [(data, teacher), second_machine(machine[1], data, teacher)]
    side_by_side([python_module("fairseq_distill.cli.cache_teacher", "--teacher", t, "--data", d, "--top-k", "8",
                                "--out", str(machine[shard] / "cache"), "--num-shards", "2", "--shard-id", str(shard))
                  for shard, (d, t) in enumerate(places)])
    for name in os.listdir(machine[1] / "cache" / "shards"):  # scp, rsync, ...
        shutil.copy(machine[1] / "cache" / "shards" / name, machine[0] / "cache" / "shards")
    cache = str(machine[0] / "cache")
    run(python_module("fairseq_distill.cli.cache_teacher", "--data", data, "--out", cache,
                      "--num-shards", "2", "--merge"))
    return cache


def test_two_nodes_with_a_teacher_cache_match_one_process(tiny_data, tiny_teacher, tmp_path):
    cache = cache_made_on_two_machines(tiny_data, tiny_teacher, tmp_path)
    extra = ["--teacher-cache", cache, "--criterion", "word_kd", "--kd-weight", "0.5"]
    two_out, two = train_on_two_nodes(tiny_data, str(tmp_path / "nodes"), extra, UPDATES)
    one_out, one = train_in_one_process(tiny_data, str(tmp_path / "one"), extra, UPDATES, update_freq=2)
    assert "word-level KD reads teacher cache" in two_out and "word_kd_loss" in two_out
    assert_two_nodes_match_one_process(two_out, two, one_out, one)
    # control: one batch per update is another training, and ends with other weights
    _, other = train_in_one_process(tiny_data, str(tmp_path / "other"), extra, UPDATES, update_freq=1)
    assert max_difference(other, one) > 1e-3


def test_two_nodes_with_an_online_teacher_match_one_process(tiny_data, tiny_teacher, tmp_path):
    from fairseq_distill.compat import load_checkpoint

    extra = ["--teacher-path", tiny_teacher, "--criterion", "word_kd", "--kd-weight", "0.5"]
    workdir = tmp_path / "nodes"
    two_out, two = train_on_two_nodes(tiny_data, str(workdir), extra, UPDATES)
    one_out, one = train_in_one_process(tiny_data, str(tmp_path / "one"), extra, UPDATES, update_freq=2)
    assert re.search(r"word_kd_loss=[1-9]", two_out)  # the teacher ran
    assert_two_nodes_match_one_process(two_out, two, one_out, one)
    # the teacher each node ran, after training, is the checkpoint's, bit for bit
    saved = load_checkpoint(tiny_teacher)["model"]
    for rank in range(2):
        used = torch.load(workdir / f"teacher{rank}.pt")
        assert set(used) == set(saved)
        assert all(torch.equal(used[k], saved[k]) for k in saved), f"node {rank} changed its teacher"


def test_torchrun_mistakes_are_refused_with_the_flags_that_work(tiny_data, tiny_teacher, tmp_path):
    """Without --distributed-world-size each node would train alone; on CPUs fairseq cannot infer
    the device from torchrun's environment."""
    base = node_training_argv(tiny_data, str(tmp_path), ["--teacher-path", tiny_teacher, "--criterion", "word_kd"], 1)

    def without(*dropped):
        def argv(rank):
            args, out = base(rank), []
            while args:
                flag = args.pop(0)
                if flag in dropped:
                    args.pop(0)
                else:
                    out.append(flag)
            return out
        return argv

    env = dump_env(str(tmp_path))
    for dropped, message in [
        (("--distributed-world-size", "--distributed-init-method", "--distributed-rank"),
         "so every process would train a model of its own on all the data: pass --distributed-world-size 2"),
        (("--distributed-init-method", "--distributed-rank"),
         "On CPUs start one process per machine (--nproc-per-node 1) and pass --distributed-init-method env://"),
    ]:
        with pytest.raises(AssertionError) as failed:
            start_nodes(without(*dropped), env)
        for rank in range(2):
            assert f"error: torchrun started this process as rank {rank} of 2" in str(failed.value)
        assert message in str(failed.value) and "ZeroDivisionError" not in str(failed.value)


# -- sequence-level KD decoded on two machines -------------------------------------------------

def files_of(directory):
    """{path under ``directory``: contents} of every file in it, subfolders included."""
    found = {}
    for root, _, names in os.walk(directory):
        for name in names:
            path = os.path.join(root, name)
            found[os.path.relpath(path, directory)] = open(path, "rb").read()
    return found


def test_seqkd_shards_decoded_on_two_machines_merge_into_the_one_process_data(tiny_data, fluent_teacher, tmp_path):
    """Each machine decodes its shard into its own work directory, from its own copy of the data
    and the teacher at other paths (the teacher under the same file name); machine 1's shard is
    copied to machine 0, which merges. The result is the one-process run's, byte for byte: the
    same shards of the same batches, decoded alike. The teacher writes sentences that mostly end
    before the length limit, so the hypotheses differ from sentence to sentence."""
    decoding = ["--num-shards", "2", "--beam", "1", "--max-len-b", "8"]
    one = tmp_path / "one"
    run(python_module("fairseq_distill.cli.seqkd", "--teacher", fluent_teacher, "--data", tiny_data, "--out", str(one),
                      *decoding, "--on-missing", "reference"))

    machine = [tmp_path / "machine0", tmp_path / "machine1"]
    places = [(tiny_data, fluent_teacher), second_machine(machine[1], tiny_data, fluent_teacher)]
    side_by_side([python_module("fairseq_distill.cli.seqkd", "--teacher", teacher, "--data", data,
                                "--work", str(machine[shard] / "work"), "--shard-id", str(shard), *decoding)
                  for shard, (data, teacher) in enumerate(places)])
    assert sorted(os.listdir(machine[1] / "work"))[0] == "shard1-of-2.jsonl"
    shutil.copy(machine[1] / "work" / "shard1-of-2.jsonl", machine[0] / "work")  # scp, rsync, ...
    merged = machine[0] / "seqkd-bin"
    run(python_module("fairseq_distill.cli.seqkd", "--data", tiny_data, "--work", str(machine[0] / "work"),
                      "--num-shards", "2", "--merge", "--out", str(merged), "--on-missing", "reference"))

    ours, theirs = files_of(merged), files_of(one)
    assert set(ours) == set(theirs) and {"train.de-en.en.bin", os.path.join("raw", "valid.en")} <= set(ours)
    # fairseq-preprocess's log names the folders; the summary holds timings besides the counts
    summary, log = "seqkd_summary.json", "preprocess.log"
    for name in sorted(set(ours) - {summary, log}):
        assert ours[name] == theirs[name], f"{name} differs from the one-process run's"

    def untimed(raw):
        return {k: v for k, v in json.loads(raw).items() if not k.endswith("seconds") and k != "sentences_per_second"}
    assert untimed(ours[summary]) == untimed(theirs[summary])
    counts = json.loads(ours[summary])
    assert counts["kept"] == 400 and counts["hypotheses_at_length_limit"] < 100
