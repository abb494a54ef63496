"""Composable distillation terms: --criterion distill sums any word, layer and attention terms."""
import math
import os

import pytest
import torch

from helpers import (PACKAGE_DIR, REPO, TINY_MODEL, TRAIN_FLAGS, build, build_trainer, first_batch,
                     python_module, run)
from fairseq_distill.errors import DistillError

FIXTURES = os.path.join(REPO, "tests", "fixtures", "v0_1_checkpoints")
DATA, TEACHER = os.path.join(FIXTURES, "data-bin"), os.path.join(FIXTURES, "teacher.pt")
DISTILL = ["--task", "translation_distill", "--teacher-path", TEACHER]


def test_ckd_plus_a2d_is_the_weighted_sum_of_its_terms():
    cfg, task, model = build(DATA, *DISTILL, "--distill-terms", "word_kd,ckd,a2d", "--kd-weight", "0.2",
                             "--layer-weight", "0.5", "--a2d-weight", "0.3", criterion="distill")
    crit = task.build_criterion(cfg.criterion)
    assert list(crit.terms) == ["word_kd", "ckd", "a2d"]
    model.train()
    loss, sample_size, logs = crit(model, first_batch(task))
    # CE gets 1 − η − λ; the attention term comes on top
    want = 0.3 * logs["ce_loss"] + 0.2 * logs["word_kd_loss"] + 0.5 * logs["ckd_loss"] + 0.3 * logs["a2d_loss"]
    assert loss.item() == pytest.approx(want.item(), rel=1e-6)
    for name, weight in (("ce", 0.3), ("word_kd", 0.2), ("ckd", 0.5), ("a2d", 0.3)):
        assert logs[f"{name}_weighted"].item() == pytest.approx(weight * logs[f"{name}_loss"].item(), rel=1e-6)
    parts = sum(logs[f"{n}_weighted"] for n in ("ce", "word_kd", "ckd", "a2d"))
    assert parts.item() == pytest.approx(loss.item(), rel=1e-6)
    assert logs["a2d_weight"] == pytest.approx(0.3 * sample_size)
    loss.backward()
    names = [n for n, _ in crit.named_parameters()]
    assert any(n.startswith("terms.ckd.fusers.") for n in names)
    assert any(n.startswith("terms.a2d.aams.") for n in names)
    for name, p in crit.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


@pytest.mark.parametrize("criterion, extra, want", [
    # each criterion's documented defaults, with the cross-entropy 2, word-level KD 3, the layer
    # term 5 and the attention term 7 (per target token, summed over the batch):
    ("word_kd", [], 0.5 * 2 + 0.5 * 3),                  # Kim and Rush: η = 0.5, CE the rest
    ("pkd", [], 0.2 * 2 + 0.1 * 3 + 0.7 * 5),            # η = 0.1, λ = 0.7, CE 0.2
    ("ckd", [], 0.2 * 2 + 0.1 * 3 + 0.7 * 5),
    ("alp_kd", [], 0.2 * 2 + 0.1 * 3 + 0.7 * 5),
    ("a2d", [], 0.5 * 2 + 0.5 * 3 + 1.0 * 7),            # α = 0.5; β = 1 (flat) on top of the rest
    ("a2d", ["--a2d-kl-mode", "rowwise"], 0.5 * 2 + 0.5 * 3 + 0.01 * 7),  # rowwise's own β = 0.01
    ("a2d", ["--a2d-released"], 0.5 * 2 + 0.5 * 3 + 1.0 * 7),
    ("distill", ["--distill-terms", "word_kd,ckd,a2d", "--kd-weight", "0.2", "--layer-weight", "0.5",
                 "--a2d-weight", "0.3"], 0.3 * 2 + 0.2 * 3 + 0.5 * 5 + 0.3 * 7),
    ("distill", ["--distill-terms", "word_kd,ckd", "--ce-weight", "1"], 1 * 2 + 0.1 * 3 + 0.7 * 5),
])
def test_the_loss_is_the_weighted_sum_by_hand(criterion, extra, want):
    """Issue 31, 2.7: the criterion's arithmetic on known term values, not on what it logs."""
    cfg, task, model = build(DATA, *DISTILL, *extra, criterion=criterion)
    crit = task.build_criterion(cfg.criterion)
    values = {"word_kd": 3.0, "pkd": 5.0, "ckd": 5.0, "alp_kd": 5.0, "a2d": 7.0}
    crit.label_smoothed_ce = lambda *args, **kwargs: (torch.tensor(2.0), torch.tensor(1.5))
    crit.term_values = lambda terms, *args: {name: torch.tensor(values[name]) for name in terms}
    model.train()
    loss, sample_size, logs = crit(model, first_batch(task))
    assert loss.item() == pytest.approx(want, rel=1e-6)
    assert logs["ce_loss"].item() == 2.0 and logs["nll_loss"].item() == 1.5


def test_presets_are_the_distill_criterion_with_fixed_terms():
    for criterion, terms in (("word_kd", ["word_kd"]), ("pkd", ["word_kd", "pkd"]), ("alp_kd", ["word_kd", "alp_kd"]),
                             ("a2d", ["word_kd", "a2d"])):
        cfg, task, _ = build(DATA, *DISTILL, criterion=criterion)
        crit = task.build_criterion(cfg.criterion)
        assert list(crit.terms) == terms, criterion
    cfg, task, _ = build(DATA, *DISTILL, "--distill-terms", "word_kd,pkd", criterion="distill")
    crit = task.build_criterion(cfg.criterion)
    # --criterion distill takes each method's own defaults: η = 0.1 with layer KD, l2 for PKD
    assert crit.terms["word_kd"].weight == 0.1 and crit.terms["pkd"].normalize == "l2"


def test_the_task_tells_the_criterion_fairseqs_epoch_and_update():
    _, task, _, crit, trainer = build_trainer(DATA, *DISTILL, "--a2d-weight", "2.0", criterion="a2d")
    task.begin_epoch(3, trainer.get_model())
    sample = first_batch(task)
    trainer.train_step([sample])
    trainer.train_step([sample])
    attention = crit.terms["a2d"]
    assert (attention.epoch, attention.num_updates) == (3, 1)  # update numbers count from 0
    assert attention.current_weight() == pytest.approx(2.0 * 0.9 ** 2)


@pytest.mark.parametrize("terms,message", [
    ("word_kd,pkd,ckd", "at most one layer-KD term"),
    ("word_kd,mse", "unknown term 'mse'; valid terms: word_kd, pkd, ckd, alp_kd, a2d"),
    ("a2d,a2d", "names a term twice"),
])
def test_bad_term_lists_are_named(terms, message):
    cfg, task, _ = build(DATA, *DISTILL, "--distill-terms", terms, criterion="distill")
    with pytest.raises(DistillError, match=message):
        task.build_criterion(cfg.criterion)


def test_weights_that_leave_ce_negative_are_refused():
    cfg, task, _ = build(DATA, *DISTILL, "--distill-terms", "word_kd,ckd", "--kd-weight", "0.5",
                         "--layer-weight", "0.7", criterion="distill")
    with pytest.raises(DistillError, match=r"KD weights \(word_kd 0.5 \+ ckd 0.7\) exceed 1"):
        task.build_criterion(cfg.criterion)


def train(save_dir, *extra, check=True):
    return run(python_module("fairseq_cli.train", DATA, "--user-dir", PACKAGE_DIR, *TRAIN_FLAGS, *TINY_MODEL,
                             *DISTILL, "--save-dir", str(save_dir), *extra), check=check)


def logged(out, key):
    values = [float(part.split()[1]) for line in out.splitlines() if "| train" in line
              for part in line.split(" | ") if part.startswith(key + " ")]
    assert values, f"no {key} in the log"
    return values


def test_combined_terms_train_from_the_command_line(tmp_path):
    out = train(tmp_path, "--criterion", "distill", "--distill-terms", "word_kd,ckd,a2d",
                "--kd-side", "both", "--max-update", "3").stdout
    for key in ("word_kd_loss", "ckd_loss", "a2d_loss", "ce_weighted", "a2d_weighted", "a2d_weight"):
        assert all(math.isfinite(v) for v in logged(out, key)), key
    state = torch.load(tmp_path / "checkpoint_last.pt", weights_only=False)
    keys = set(state["criterion"])
    assert {"terms.ckd.fusers.encoder.maps.0.weight", "terms.ckd.fusers.decoder.maps.0.weight",
            "terms.a2d.aams.encoder_self.weight", "terms.a2d.aams.decoder_cross.weight"} <= keys


def test_resuming_with_another_layer_map_says_what_to_do(tmp_path):
    train(tmp_path, "--criterion", "ckd", "--layer-map", "1,2", "--max-update", "2")
    proc = train(tmp_path, "--criterion", "ckd", "--layer-map", "2", "--max-update", "4", check=False)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stdout
    # the 16-wide student's state mapped to the 24-wide teacher's (the default where widths differ)
    assert ("error: criterion parameter 'terms.ckd.fusers.encoder.maps.0.weight' has shape (48, 16) in "
            "the checkpoint but (24, 16) now") in proc.stdout
    assert "--reset-distill-parameters --reset-optimizer" in proc.stdout
    # the way out it names works: the model weights are kept, projections learned afresh
    train(tmp_path, "--criterion", "ckd", "--layer-map", "2", "--max-update", "4",
          "--reset-distill-parameters", "--reset-optimizer")
    state = torch.load(tmp_path / "checkpoint_last.pt", weights_only=False)
    assert state["optimizer_history"][-1]["num_updates"] == 4
    assert tuple(state["criterion"]["terms.ckd.fusers.encoder.maps.0.weight"].shape) == (24, 16)


@pytest.mark.slow
@pytest.mark.parametrize("criterion", ["pkd", "alp_kd"])
def test_resuming_a_teacher_side_projection_names_the_side(tmp_path, criterion):
    """pkd and alp_kd once mapped the teacher's states by default; a run trained so, resumed
    under today's student-side default, finds its map transposed: the error names the flag."""
    train(tmp_path, "--criterion", criterion, "--layer-project", "teacher", "--max-update", "2")
    proc = train(tmp_path, "--criterion", criterion, "--max-update", "4", check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stdout
    # the options its map was trained with are recorded in the checkpoint and compared first
    assert (f"the checkpoint's {criterion} parameters were trained with --layer-project teacher, "
            "this run uses --layer-project student") in proc.stdout
    assert "resume with --layer-project teacher" in proc.stdout
    # the flag it names resumes the run
    train(tmp_path, "--criterion", criterion, "--layer-project", "teacher", "--max-update", "4")
    state = torch.load(tmp_path / "checkpoint_last.pt", weights_only=False)
    assert state["optimizer_history"][-1]["num_updates"] == 4


@pytest.mark.parametrize("preset,terms", [("word_kd", "word_kd"), ("ckd", "word_kd,ckd"), ("pkd", "word_kd,pkd"),
                                          ("alp_kd", "word_kd,alp_kd"), ("a2d", "word_kd,a2d")])
def test_a_preset_and_distill_with_its_terms_train_alike_with_equal_flags(preset, terms, tiny_data, deep_teacher):
    """issue 31.2.1: no --label-smoothing given, every criterion smooths by 0.1 (Vaswani et al.,
    whom the papers follow), so a preset equals distill with its terms, flag for flag."""
    from fairseq_distill.trainer_setup import build_task_and_model
    from helpers import PACKAGE_DIR, TINY_MODEL, TRAIN_FLAGS

    i = TRAIN_FLAGS.index("--label-smoothing")
    flags = TRAIN_FLAGS[:i] + TRAIN_FLAGS[i + 2:]
    losses = {}
    for name, extra in ((preset, []), ("distill", ["--distill-terms", terms])):
        argv = [tiny_data, "--user-dir", PACKAGE_DIR, "--criterion", name, *flags, *TINY_MODEL, "--dropout", "0",
                "--task", "translation_distill", "--teacher-path", deep_teacher, *extra]
        cfg, task, model = build_task_and_model(argv)
        assert cfg.criterion.label_smoothing == 0.1
        criterion = task.build_criterion(cfg.criterion)
        model.train()
        torch.manual_seed(0)
        loss, _, logs = criterion(model, first_batch(task))
        losses[name] = (loss.item(), logs["ce_loss"].item())
    assert losses[preset] == pytest.approx(losses["distill"], rel=1e-6)
