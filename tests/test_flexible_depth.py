"""The flexible-depth model and its multi-task training, decoding and sub-network export."""
import json
import os
import re
import sys

import pytest
import torch

from helpers import PACKAGE_DIR, build, fairseq_train, first_batch, python_module, run, stock_env
from fairseq_distill.depth.strategies import plan
from fairseq_distill.errors import DistillError

from test_distributed import assert_identical_replicas, run_two_ranks

# 4 encoder layers (depths 1, 2, 4) and 2 decoder layers (depths 1, 2): 6 tasks
FLEX = ["--arch", "flexible_transformer", "--share-all-embeddings",
        "--encoder-layers", "4", "--decoder-layers", "2",
        "--encoder-embed-dim", "16", "--decoder-embed-dim", "16",
        "--encoder-ffn-embed-dim", "32", "--decoder-ffn-embed-dim", "32",
        "--encoder-attention-heads", "2", "--decoder-attention-heads", "2"]
MULTI = ["--task", "translation_multidepth"]
CE = "label_smoothed_cross_entropy"


def flexible(tiny_data, *extra):
    return build(tiny_data, *MULTI, *extra, criterion=CE, model=FLEX)


def test_each_depth_runs_its_subnetwork(tiny_data):
    _, task, model = flexible(tiny_data, "--depth-strategy", "middle_left")
    assert model.depths == ([1, 2, 4], [1, 2])
    assert model.depth == (4, 2)  # decoding default: the full model
    assert task.depth_tasks(model) == [(1, 1), (1, 2), (2, 1), (2, 2), (4, 1), (4, 2)]
    ran = []
    for i in range(4):
        model.encoder.layers[i].register_forward_pre_hook(lambda _m, _a, i=i: ran.append(i))
    sample = first_batch(task)
    for depth in (1, 2, 4):
        ran.clear()
        model.set_depth(depth, 1)
        model(**sample["net_input"])
        assert ran == plan(4, [1, 2, 4], "middle_left")[depth]
    with pytest.raises(DistillError, match=r"encoder depth 3 is not one this model was built for; its encoder depths are \[1, 2, 4\]"):
        model.set_depth(3, 1)


def test_depth_options_are_checked(tiny_data):
    with pytest.raises(DistillError, match=r"encoder depth\(s\) \[3\] not supported by 4 layers; .*\[1, 2, 4\]"):
        flexible(tiny_data, "--encoder-depths", "2,3")
    with pytest.raises(DistillError, match="not TransformerModel"):
        build(tiny_data, *MULTI, criterion=CE)  # a stock transformer cannot train at many depths


class Backward:
    """The part of a fairseq optimizer that train_step uses."""

    def backward(self, loss):
        loss.backward()


def grads(model):
    return {n: p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)
            for n, p in model.named_parameters()}


def test_one_update_accumulates_the_sum_of_the_task_gradients(tiny_data):
    cfg, task, model = flexible(tiny_data)
    criterion = task.build_criterion(cfg.criterion)
    sample = first_batch(task)
    model.train()
    want = {n: torch.zeros_like(p) for n, p in model.named_parameters()}
    losses = {}
    for m, n in task.depth_tasks(model):
        model.zero_grad()
        model.set_depth(m, n)
        loss, _, _ = criterion(model, sample)
        loss.backward()
        losses[(m, n)] = loss.item()
        for k, g in grads(model).items():
            want[k] += g
    model.set_depth()
    model.zero_grad()
    loss, sample_size, log = task.train_step(sample, model, criterion, Backward(), update_num=1)
    got = grads(model)
    for k in want:
        assert torch.allclose(got[k], want[k], atol=1e-5), k
    assert loss.item() == pytest.approx(sum(losses.values()), rel=1e-5)
    assert sample_size == sample["ntokens"]
    assert log["task_loss_e2_d1"] == pytest.approx(losses[(2, 1)], rel=1e-5)
    assert log["loss"] == pytest.approx(sum(losses.values()) / 6, rel=1e-5)
    assert model.depth == (4, 2)  # restored for validation and decoding


def test_sampled_depths_are_reproducible(tiny_data):
    _, task, model = flexible(tiny_data, "--sample-encoder-depths", "2", "--sample-decoder-depths", "1")
    seen = set()
    for update in range(1, 40):
        tasks = task.depth_tasks(model, update)
        assert len(tasks) == 2 and tasks == task.depth_tasks(model, update)
        seen.add(tuple(tasks))
    assert len(seen) > 3
    assert len(task.depth_tasks(model)) == 6  # validation: every task


@pytest.fixture(scope="module")
def multidepth_checkpoint(tiny_data, tmp_path_factory):
    """A pre-norm full-depth model, then multi-task training from it (the paper's pipeline)."""
    root = tmp_path_factory.mktemp("flexible")
    full = fairseq_train(tiny_data, str(root / "full"), "--user-dir", PACKAGE_DIR, *FLEX,
                         "--criterion", CE, "--max-update", "20")
    assert full.returncode == 0
    out = fairseq_train(tiny_data, str(root / "multi"), "--user-dir", PACKAGE_DIR, *MULTI, *FLEX,
                        "--criterion", CE, "--max-update", "6", "--lr", "0.005",
                        "--finetune-from-model", str(root / "full" / "checkpoint_last.pt")).stdout
    return str(root / "multi" / "checkpoint_last.pt"), out


@pytest.mark.slow
def test_multitask_training_logs_every_task(multidepth_checkpoint):
    _, out = multidepth_checkpoint
    assert "loading pretrained model from" in out
    train = [line for line in out.splitlines() if "| train |" in line][-1]
    for m in (1, 2, 4):
        for n in (1, 2):
            assert re.search(rf"task_loss_e{m}_d{n} \d", train), train
    valid = [line for line in out.splitlines() if "| valid |" in line][-1]
    assert "task_loss_e1_d1" in valid
    # the shallowest sub-network is worse than the full model
    e1 = float(re.search(r"task_loss_e1_d1 ([\d.]+)", valid).group(1))
    e4 = float(re.search(r"task_loss_e4_d2 ([\d.]+)", valid).group(1))
    assert e1 > e4


def hypotheses(out):
    """sentence id -> (score, tokens): the scores tell sub-networks apart even where an
    undertrained model writes the same words"""
    return {int(m.group(1)): (m.group(2), m.group(3)) for m in re.finditer(r"^H-(\d+)\t(\S+)\t(.*)$", out, re.M)}


@pytest.mark.slow
def test_decoding_at_a_depth_equals_the_exported_subnetwork(tiny_data, multidepth_checkpoint, tmp_path):
    path, _ = multidepth_checkpoint
    generate = ["--cpu", "--beam", "2", "--max-len-b", "8", "--batch-size", "16"]
    with_overrides = run(python_module(
        "fairseq_cli.generate", tiny_data, "--path", path, "--user-dir", PACKAGE_DIR, *generate,
        "--model-overrides", "{'encoder_depth': 2, 'decoder_depth': 1}")).stdout
    exported = str(tmp_path / "e2d1.pt")
    msg = run([os.path.join(os.path.dirname(sys.executable), "fsd-export-subnetwork"), path, exported,
               "--encoder-depth", "2", "--decoder-depth", "1"]).stdout
    assert re.search(r"transformer 2\+1 \(encoder layers \[\d, \d\], decoder layers \[\d\]\)", msg), msg
    # stock fairseq, no plugin
    standalone = run(python_module("fairseq_cli.generate", tiny_data, "--path", exported, *generate),
                     env=stock_env()).stdout
    a, b = hypotheses(with_overrides), hypotheses(standalone)
    assert len(a) == 40 and a == b
    full = hypotheses(run(python_module("fairseq_cli.generate", tiny_data, "--path", path, "--user-dir",
                                        PACKAGE_DIR, *generate)).stdout)
    assert full != a  # the override did change the network
    state = torch.load(exported, weights_only=True)
    assert state["cfg"]["model"]["encoder_layers"] == 2 and state["cfg"]["model"]["_name"] == "transformer"


@pytest.mark.slow
def test_multidepth_data_parallel_replicas_identical(tiny_data, tmp_path):
    out, weights = run_two_ranks(tiny_data, str(tmp_path), [
        *FLEX, "--task", "translation_multidepth_replica_dump", "--criterion", CE,
        "--sample-encoder-depths", "2"], max_update=3)
    assert_identical_replicas(out, weights)
    assert "task_loss_e" in out


@pytest.mark.slow
def test_evaluate_depths_writes_tables_and_heat_map(tiny_data, multidepth_checkpoint, deep_teacher, tmp_path):
    path, _ = multidepth_checkpoint
    out = run(python_module("fairseq_distill.cli.evaluate_depths", path, tiny_data, "--out",
                            str(tmp_path / "flex"), "--encoder-depths", "1,4", "--decoder-depths", "2",
                            "--beam", "1")).stdout
    rows = json.load(open(tmp_path / "flex.json"))["rows"]
    assert [(r["encoder_depth"], r["decoder_depth"]) for r in rows] == [(1, 2), (4, 2)]
    assert rows[0]["overrides"] == {"encoder_depth": 1, "decoder_depth": 2}
    table = open(tmp_path / "flex.md").read()
    assert re.search(r"^\| 1 \| [\d.]+ \|$", table, re.M) and re.search(r"^\| 4 \| [\d.]+ \|$", table, re.M)
    assert os.path.getsize(tmp_path / "flex.png") > 1000 and "wrote" in out
    # chrF beside BLEU, and each pair's hypotheses kept for paired tests, one line a sentence
    assert "chrF (rows: encoder depth" in table and all(0 <= r["chrf"] <= 100 for r in rows)
    references = open(rows[0]["references"]).read().splitlines()
    assert rows[0]["hypotheses"] != rows[1]["hypotheses"]
    assert all(len(open(r["hypotheses"]).read().splitlines()) == len(references) for r in rows)
    # an ordinary Transformer (3+2 layers) pruned with LayerDrop's rule at decoding time
    run(python_module("fairseq_distill.cli.evaluate_depths", deep_teacher, tiny_data, "--out",
                      str(tmp_path / "pruned"), "--prune", "left", "--encoder-depths", "1,3",
                      "--decoder-depths", "1", "--beam", "1"))
    pruned = json.load(open(tmp_path / "pruned.json"))["rows"]
    assert [r["overrides"] for r in pruned] == [
        {"encoder_layers_to_keep": "0", "decoder_layers_to_keep": "0"},
        {"encoder_layers_to_keep": "0,1,2", "decoder_layers_to_keep": "0"}]
    assert pruned[0]["tokens_per_second"] > 0
    bad = run(python_module("fairseq_distill.cli.evaluate_depths", deep_teacher, tiny_data, "--out",
                            str(tmp_path / "x")), check=False)
    assert bad.returncode != 0 and "is not a flexible_transformer; for an ordinary Transformer pass --prune" in bad.stdout
