"""A2D through fairseq-train: the decay schedule survives a resume, students stay clean."""
import json
import re

import pytest
import torch

from helpers import (
    assert_heatmap_refuses_exported, build_trainer, distill_train, export_drops_criterion_and_decodes_stock,
    python_module, run,
)

pytestmark = pytest.mark.slow  # every test trains with fairseq-train


def epoch_summaries(out):
    """{epoch: {metric: value}} from fairseq's end-of-epoch train lines."""
    found = {}
    for line in out.splitlines():
        m = re.search(r"\| train \| epoch (\d+) \| (.*)", line)
        if m:
            found[int(m.group(1))] = dict(re.findall(r"(\w+) ([-\d.e]+)", m.group(2)))
    return found


def train(data, teacher, save, *extra):
    return distill_train(data, teacher, save, "a2d", *extra)


def test_a2d_train_resume_schedule_export_generate_heatmap(tiny_data, deep_teacher, tmp_path):
    save = str(tmp_path / "ckpt")
    # the paper's per-epoch schedule, β·0.9^(epoch − 1), across a resume
    out = train(tiny_data, deep_teacher, save, "--max-epoch", "2", "--a2d-weight", "1.0",
                "--a2d-decay-schedule", "epoch")
    summaries = epoch_summaries(out)
    assert set(summaries) == {1, 2}
    for key in ("a2d_loss", "word_kd_loss", "ce_loss"):
        assert float(summaries[1][key]) > 0, key
    assert float(summaries[1]["a2d_weight"]) == pytest.approx(1.0)
    assert float(summaries[2]["a2d_weight"]) == pytest.approx(0.9)
    assert "a2d decoder_cross: AAM 1x2 student heads -> 2x2 teacher heads" in out

    saved = torch.load(f"{save}/checkpoint_last.pt", map_location="cpu", weights_only=False)
    assert sorted(k for k in saved["criterion"] if k.endswith("weight")) == [
        "terms.a2d.aams.decoder_cross.weight", "terms.a2d.aams.decoder_self.weight",
        "terms.a2d.aams.encoder_self.weight"]

    # fairseq's resume path restores the alignment modules exactly
    _, _, _, crit, trainer = build_trainer(tiny_data, "--task", "translation_distill",
                                           "--teacher-path", deep_teacher, "--save-dir", save,
                                           criterion="a2d")
    trainer.load_checkpoint(f"{save}/checkpoint_last.pt")
    for key, value in saved["criterion"].items():
        if not torch.is_tensor(value):  # the loss forms and the collapse watch
            continue
        assert torch.equal(crit.state_dict()[key], value), key

    # a resumed run continues the schedule from fairseq's epoch counter: 0.9² in epoch 3
    out = train(tiny_data, deep_teacher, save, "--max-epoch", "3", "--a2d-weight", "1.0",
                "--a2d-decay-schedule", "epoch")
    assert "Loaded checkpoint" in out
    summaries = epoch_summaries(out)
    assert set(summaries) == {3}
    assert float(summaries[3]["a2d_weight"]) == pytest.approx(0.81)

    # the decoding checkpoint has no alignment module and decodes in stock fairseq-generate
    exported = str(tmp_path / "student.pt")
    export_drops_criterion_and_decodes_stock(tiny_data, f"{save}/checkpoint_best.pt", exported, "aam")

    # heat maps of the learned alignment, per attention type
    png = str(tmp_path / "a2d.png")
    out = run(python_module("fairseq_distill.cli.a2d_heatmap", f"{save}/checkpoint_last.pt", "--out", png)).stdout
    assert open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    matrices = json.load(open(str(tmp_path / "a2d.json")))
    assert set(matrices) == {"encoder_self", "decoder_self", "decoder_cross"}
    enc = matrices["encoder_self"]
    assert enc["student"] == [1, 2] and enc["teacher"] == [3, 2]
    assert len(enc["weight"]) == 6 and len(enc["weight"][0]) == 2
    final = torch.load(f"{save}/checkpoint_last.pt", map_location="cpu", weights_only=False)["criterion"]
    assert enc["weight"][4][1] == pytest.approx(final["terms.a2d.aams.encoder_self.weight"][4, 1].item(), abs=1e-5)
    assert "encoder_self: 1x2 student heads -> 3x2 teacher heads" in out

    assert_heatmap_refuses_exported("fairseq_distill.cli.a2d_heatmap", exported, png)


def test_student_with_more_heads_than_teacher(tiny_data, deep_teacher, tmp_path):
    """Heads need not match: a 4-head student aligned to a 2-head teacher."""
    out = train(tiny_data, deep_teacher, str(tmp_path / "ckpt"), "--max-update", "2",
                "--encoder-attention-heads", "4", "--decoder-attention-heads", "4",
                "--a2d-attention-types", "encoder")
    assert "a2d encoder_self: AAM 1x4 student heads -> 3x2 teacher heads" in out
    assert re.search(r"a2d_loss \d", out)


def test_default_decay_spreads_the_authors_epochs_over_the_run(tiny_data, deep_teacher, tmp_path):
    """The default --a2d-decay-schedule run over --max-epoch 3: epochs 1, 2, 3 stand for the
    authors' epochs 1, 50.5 and 100, weights 1, 0.9^49.5 = 0.0054 and 0.9^99 (logged 0)."""
    out = train(tiny_data, deep_teacher, str(tmp_path / "ckpt"), "--max-epoch", "3")
    summaries = epoch_summaries(out)
    assert [float(summaries[e]["a2d_weight"]) for e in (1, 2, 3)] == [1.0, 0.0054, 0.0]
    assert "flat KL" in out and "over this run's 3 epochs" in out
