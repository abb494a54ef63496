"""The teacher is frozen, kept out of the optimizer and checkpoints, and unused in validation."""
import pytest
import torch
from fairseq.criterions.label_smoothed_cross_entropy import LabelSmoothedCrossEntropyCriterion

from helpers import build, build_trainer, first_batch
from fairseq_distill.losses import ensemble_log_probs, log_probs_at, word_kd_loss


def teacher_args(tiny_teacher, *extra):
    return ("--task", "translation_distill", "--teacher-path", tiny_teacher, *extra)


def test_teacher_unchanged_after_real_optimizer_steps(tiny_data, tiny_teacher, tmp_path):
    cfg, task, model, crit, trainer = build_trainer(tiny_data, *teacher_args(tiny_teacher))
    teacher = task.teacher
    assert teacher is not None and len(teacher) == 1
    before_teacher = [p.detach().clone() for p in teacher.parameters()]
    before_student = [p.detach().clone() for p in model.parameters()]
    sample = first_batch(task)
    for _ in range(3):
        logs = trainer.train_step([sample])
        assert logs is not None
    assert trainer.get_num_updates() == 3

    for old, new in zip(before_teacher, teacher.parameters()):
        assert torch.equal(old, new), "a teacher weight changed"
        assert not new.requires_grad and new.grad is None
    assert any(not torch.equal(o, n) for o, n in zip(before_student, model.parameters())), \
        "the student did not train"
    assert all(not m.training for m in teacher.models)  # eval mode although train() ran every step

    teacher_ids = {id(p) for p in teacher.parameters()}
    optimized = {id(p) for group in trainer.optimizer.param_groups for p in group["params"]}
    assert not (teacher_ids & optimized), "a teacher tensor is in the optimizer"
    # nothing of the teacher hangs off the model or the criterion as a module
    assert not (teacher_ids & {id(p) for p in model.parameters()})
    assert not (teacher_ids & {id(p) for p in crit.parameters()})

    path = str(tmp_path / "ckpt.pt")
    trainer.consolidate_optimizer()  # as checkpoint_utils.save_checkpoint does
    trainer.save_checkpoint(path, {})
    saved = torch.load(path, map_location="cpu", weights_only=False)
    assert set(saved["model"]) == set(model.state_dict())
    assert saved["criterion"] is None
    assert not any("teacher" in key for key in saved["model"])


def test_teacher_not_loaded_for_model_building(tiny_data, tiny_teacher):
    # fairseq-generate builds the task and the model, never the criterion
    _, task, _ = build(tiny_data, *teacher_args(tiny_teacher))
    assert task.teacher is None


def test_validation_never_runs_the_teacher(tiny_data, tiny_teacher):
    _, task, _, _, trainer = build_trainer(tiny_data, *teacher_args(tiny_teacher))
    calls = []
    original = task.teacher.features
    task.teacher.features = lambda *a, **k: calls.append(1) or original(*a, **k)
    sample = first_batch(task, "valid")
    logs = trainer.valid_step(sample)
    assert calls == []
    assert "word_kd_loss" not in logs and logs["loss"] > 0
    trainer.train_step([first_batch(task)])
    assert calls == [1]


@pytest.mark.parametrize("eta", [0.0, 0.3, 1.0])
def test_loss_combines_ce_and_kd_by_eta(tiny_data, tiny_teacher, eta):
    """loss = (1-η)·CE_ls + η·τ²·KL, with CE from fairseq's own criterion and KL from a direct
    teacher forward."""
    tau = 2.0
    cfg, task, model = build(tiny_data, *teacher_args(tiny_teacher, "--kd-weight", str(eta),
                                                      "--kd-temperature", str(tau)))
    crit = task.build_criterion(cfg.criterion)
    sample = first_batch(task)
    model.train()
    loss, sample_size, logs = crit(model, sample)

    stock = LabelSmoothedCrossEntropyCriterion(task, False, 0.1)
    ce, _, _ = stock(model, sample)
    student_logits = model(**sample["net_input"])[0]
    with torch.no_grad():
        teacher_logits = task.teacher.models[0](**sample["net_input"])[0]
    mask = sample["target"].ne(task.target_dictionary.pad())
    kd = word_kd_loss(log_probs_at(student_logits, tau), ensemble_log_probs([teacher_logits], tau), mask, tau)
    expected = (1 - eta) * ce + eta * kd
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    assert sample_size == sample["ntokens"]
    if eta > 0:
        assert logs["word_kd_loss"].item() == pytest.approx(kd.item(), rel=1e-5)


def test_ensemble_of_two_teachers(tiny_data, tiny_teacher):
    cfg, task, model = build(tiny_data, *teacher_args(f"{tiny_teacher}:{tiny_teacher}"))
    crit = task.build_criterion(cfg.criterion)
    assert len(task.teacher) == 2
    sample = first_batch(task)
    model.train()
    loss, _, logs = crit(model, sample)
    # two identical teachers average to the single teacher
    _, task1, _ = build(tiny_data, *teacher_args(tiny_teacher))
    crit1 = task1.build_criterion(cfg.criterion)
    loss1, _, _ = crit1(model, sample)
    assert loss.item() == pytest.approx(loss1.item(), rel=1e-5)
