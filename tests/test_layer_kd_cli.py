"""Layer-KD criterions through fairseq-train: projections resume exactly, students stay clean."""
import re

import pytest
import torch

from helpers import (
    assert_heatmap_refuses_exported, build_trainer, distill_train, export_drops_criterion_and_decodes_stock,
    python_module, run,
)

pytestmark = pytest.mark.slow  # every test trains with fairseq-train


def train(tiny_data, teacher, save, criterion, *extra, updates=3):
    return distill_train(tiny_data, teacher, save, criterion, "--max-update", str(updates), *extra)


@pytest.mark.parametrize("criterion,extra", [
    ("pkd", []), ("ckd", ["--ckd-combination", "sc"]), ("alp_kd", ["--alp-granularity", "sentence"]),
])
def test_train_resume_export_generate(tiny_data, deep_teacher, tmp_path, criterion, extra):
    save = str(tmp_path / "ckpt")
    out = train(tiny_data, deep_teacher, save, criterion, *extra)
    train_line = [l for l in out.splitlines() if "| train |" in l][-1]
    for key in (f"{criterion}_loss", "word_kd_loss", "ce_loss"):
        assert re.search(rf"{key} \d", train_line), train_line
    assert "layer map (3 teacher -> 1 student layers" in out  # the resolved map is printed

    saved = torch.load(f"{save}/checkpoint_last.pt", map_location="cpu", weights_only=False)
    assert saved["criterion"] and all(k.startswith(f"terms.{criterion}.fusers.") for k in saved["criterion"]
                                      if not k.endswith("_extra_state"))  # the loss forms and the watch

    # fairseq's resume path restores the projections exactly (not a fresh initialisation)
    _, _, _, crit, trainer = build_trainer(
        tiny_data, "--task", "translation_distill", "--teacher-path", deep_teacher, *extra,
        "--save-dir", save, criterion=criterion)
    fresh = {k: v.clone() for k, v in crit.state_dict().items() if torch.is_tensor(v)}
    trainer.load_checkpoint(f"{save}/checkpoint_last.pt")
    restored = crit.state_dict()
    for key, value in saved["criterion"].items():
        if not torch.is_tensor(value):  # the loss forms and the collapse watch
            continue
        assert torch.equal(restored[key], value), key
    assert any(not torch.equal(fresh[k], saved["criterion"][k]) for k in fresh)

    # and a resumed CLI run continues with them
    out = train(tiny_data, deep_teacher, save, criterion, *extra, updates=5)
    assert "Loaded checkpoint" in out and re.search(r"num_updates 5\b", out)

    # the decoding checkpoint has no distillation-only parameters and loads in stock fairseq
    exported = str(tmp_path / "student.pt")
    export_drops_criterion_and_decodes_stock(tiny_data, f"{save}/checkpoint_best.pt", exported, "fuser")


def test_alp_heatmap_export(tiny_data, deep_teacher, tmp_path):
    import json

    save = str(tmp_path / "ckpt")
    train(tiny_data, deep_teacher, save, "alp_kd", "--alp-score", "cosine", "--kd-side", "both")
    png = str(tmp_path / "alp.png")
    out = run(python_module("fairseq_distill.cli.alp_heatmap", f"{save}/checkpoint_last.pt", "--out", png)).stdout
    assert open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    matrices = json.load(open(str(tmp_path / "alp.json")))
    assert set(matrices) == {"encoder", "decoder"}
    enc = matrices["encoder"]
    assert [r["student_layer"] for r in enc] == [1] and len(enc[0]["weights"]) == 4  # layer 0 + 3 teacher layers
    assert sum(enc[0]["weights"]) == pytest.approx(1.0, abs=1e-3)  # averaged attention sums to one
    assert len(matrices["decoder"][0]["weights"]) == 3
    assert "encoder student layer 1:" in out
    assert "DEBUG:matplotlib" not in out  # fairseq's import-time DEBUG root logger is kept out of plots

    exported = str(tmp_path / "student.pt")
    run(python_module("fairseq_distill.cli.export_student", f"{save}/checkpoint_last.pt", exported))
    assert_heatmap_refuses_exported("fairseq_distill.cli.alp_heatmap", exported, png)
