"""Training checkpoints of fairseq_distill 0.1 (before terms were composable) still resume."""
import os
import shutil

import pytest
import torch

from fairseq_distill.errors import DistillError
from helpers import PACKAGE_DIR, REPO, TINY_MODEL, TRAIN_FLAGS, build_trainer, first_batch, python_module, run

FIXTURES = os.path.join(REPO, "tests", "fixtures", "v0_1_checkpoints")
DATA = os.path.join(FIXTURES, "data-bin")
TEACHER = os.path.join(FIXTURES, "teacher.pt")
CASES = {  # fixture -> (criterion, options it was trained with, new name of its first parameter)
    # 0.1's ckd (a student narrower than its teacher) and alp_kd mapped the teacher's states;
    # today's defaults map the student's there
    "ckd": ("ckd", ["--kd-side", "both", "--ckd-project", "teacher"], "terms.ckd.fusers.encoder.maps.0.weight"),
    "alp_kd": ("alp_kd", ["--layer-project", "teacher"], "terms.alp_kd.fusers.encoder.project.weight"),
    "a2d": ("a2d", [], "terms.a2d.aams.encoder_self.weight"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_old_training_checkpoint_loads_into_the_composed_criterion(name, tmp_path):
    criterion, options, new_key = CASES[name]
    saved = torch.load(os.path.join(FIXTURES, f"{name}.pt"), weights_only=False)
    _, _, model, crit, trainer = build_trainer(
        DATA, "--task", "translation_distill", "--teacher-path", TEACHER, *options,
        "--save-dir", str(tmp_path), criterion=criterion)
    trainer.load_checkpoint(os.path.join(FIXTURES, f"{name}.pt"))
    assert trainer.get_num_updates() == 3
    ours = crit.state_dict()
    assert new_key in ours and len([k for k in ours if not k.endswith("_extra_state")]) == len(saved["criterion"])
    for key, value in saved["criterion"].items():  # every old parameter, under its new name
        new = f"terms.{criterion}." + key
        assert torch.equal(ours[new], value), key
    # and training goes on from there
    trainer.train_step([first_batch(trainer.task)])
    assert trainer.get_num_updates() == 4


@pytest.mark.parametrize("name,options", [("alp_kd", []), ("ckd", ["--kd-side", "both"])])
def test_old_checkpoint_under_todays_default_names_the_projection_flag(name, options, tmp_path):
    _, _, _, _, trainer = build_trainer(DATA, "--task", "translation_distill", "--teacher-path", TEACHER,
                                        *options, "--save-dir", str(tmp_path), criterion=name)
    with pytest.raises(Exception) as raised:  # fairseq wraps the criterion's error in its own
        trainer.load_checkpoint(os.path.join(FIXTURES, f"{name}.pt"))
    cause = raised.value
    while not isinstance(cause, DistillError) and cause.__context__ is not None:
        cause = cause.__context__
    assert isinstance(cause, DistillError)
    assert ("maps the teacher's states (--layer-project teacher), this run maps the student's "
            "(--layer-project student): resume with --layer-project teacher") in str(cause)


def test_old_checkpoint_resumes_with_fairseq_train(tmp_path):
    save = tmp_path / "run"
    save.mkdir()
    shutil.copy(os.path.join(FIXTURES, "ckd.pt"), save / "checkpoint_last.pt")
    out = run(python_module("fairseq_cli.train", DATA, "--user-dir", PACKAGE_DIR, *TRAIN_FLAGS, *TINY_MODEL,
                            "--task", "translation_distill", "--teacher-path", TEACHER, "--criterion", "ckd",
                            "--kd-side", "both", "--ckd-project", "teacher", "--max-update", "5", "--save-dir", str(save))).stdout
    assert "@ 3 updates)" in out  # resumed where version 0.1 stopped
    state = torch.load(save / "checkpoint_last.pt", weights_only=False)
    assert state["optimizer_history"][-1]["num_updates"] == 5
    assert any(k.startswith("terms.ckd.fusers.") for k in state["criterion"])


def test_analysis_reads_the_projection_side_from_an_old_checkpoint():
    """0.1's alp_kd stored no --layer-project and mapped the teacher's states; today's default
    maps the student's. The heat map tool takes the side from the checkpoint's weights."""
    from fairseq_distill.deploy.checkpoint import load_training_checkpoint
    from fairseq_distill.cli.alp_heatmap import average_alp_weights

    state = load_training_checkpoint(os.path.join(FIXTURES, "alp_kd.pt"), "alp_kd")
    assert state["cfg"].criterion.layer_project == "teacher"
    matrices = average_alp_weights(os.path.join(FIXTURES, "alp_kd.pt"), data=DATA, teacher_path=TEACHER)
    for row in matrices["encoder"]:
        assert sum(row["weights"]) == pytest.approx(1.0, abs=1e-3)


def test_resuming_with_a_map_that_needs_no_parameters_names_the_remedy(tiny_data, deep_teacher, tmp_path):
    """issue 32.9: a ckd run at the teacher's width with map '1,2' learns a fused map; resumed
    with map '2' the criterion has no parameters, so fairseq skips loading its state and torch
    refuses the optimizer state with a ValueError. The plugin's error hook says what happened
    and what to pass instead, without a traceback."""
    from helpers import train_argv, transformer_flags
    from fairseq_distill.trainer_setup import build_training
    from fairseq_distill.user_errors import find_user_error

    same_width = transformer_flags(1, 1, 24, 48)

    def trainer_with(layer_map):
        argv = train_argv(tiny_data, "--task", "translation_distill", "--teacher-path", deep_teacher,
                          "--layer-map", layer_map, "--save-dir", str(tmp_path), criterion="ckd",
                          model=same_width)
        return build_training(argv)[-1]

    first = trainer_with("1,2")
    first.train_step([first_batch(first.task)])
    first.consolidate_optimizer()  # as checkpoint_utils.save_checkpoint does
    first.save_checkpoint(str(tmp_path / "checkpoint_last.pt"), {})
    with pytest.raises(Exception) as raised:
        trainer_with("2").load_checkpoint(str(tmp_path / "checkpoint_last.pt"))
    error = find_user_error(raised.value)
    assert error is not None, repr(raised.value)
    assert "the checkpoint's distillation parameters were trained with other options" in str(error)
    assert "--reset-distill-parameters --reset-optimizer" in str(error)


def test_checkpoint_keys_from_before_the_term_registry_load(tmp_path):
    """Checkpoints written between 0.1 and the registry keyed the layer term as ``terms.layer.``
    and A2D's as ``terms.attn.``: they resume under today's names, every value in place."""
    for name, (criterion, options, new_key) in CASES.items():
        state = torch.load(os.path.join(FIXTURES, f"{name}.pt"), weights_only=False)
        old = {("terms.layer." if key.startswith("fusers.") else "terms.attn.") + key: value
               for key, value in state["criterion"].items()}
        state["criterion"] = old
        path = tmp_path / f"{name}-registry-less.pt"
        torch.save(state, path)
        _, _, _, crit, trainer = build_trainer(
            DATA, "--task", "translation_distill", "--teacher-path", TEACHER, *options,
            "--save-dir", str(tmp_path / name), criterion=criterion)
        trainer.load_checkpoint(str(path))
        ours = crit.state_dict()
        assert new_key in ours
        for key, value in old.items():
            assert torch.equal(ours[f"terms.{criterion}." + key.split(".", 2)[2]], value), key


def test_checkpoint_with_validation_bleu_meters_loads_under_weights_only(tmp_path):
    """fairseq-train --eval-bleu keeps its BLEU statistics as numpy arrays in the checkpoint's
    meters (found by the IWSLT'14 recipe: fsd-cache-teacher could not read such a teacher on
    torch >= 2.6). Loading the plugin lets torch's restricted unpickler read them."""
    import numpy as np

    import fairseq_distill  # noqa: F401  (what --user-dir does)

    state = {"model": {"w": torch.zeros(2)}, "extra_state": {"metrics": {
        "_bleu_counts": np.array([10, 5, 2, 1]), "_bleu_totals": np.array([12.0, 11.0, 10.0, 9.0]),
        "best_bleu": np.float64(12.5)}}}
    torch.save(state, tmp_path / "checkpoint_best.pt")
    loaded = torch.load(tmp_path / "checkpoint_best.pt", weights_only=True)
    assert loaded["extra_state"]["metrics"]["_bleu_counts"].tolist() == [10, 5, 2, 1]
    assert float(loaded["extra_state"]["metrics"]["best_bleu"]) == 12.5


def save_after_one_step(trainer, path):
    trainer.train_step([first_batch(trainer.task)])
    trainer.consolidate_optimizer()  # as checkpoint_utils.save_checkpoint does
    trainer.save_checkpoint(str(path), {})


def resume_error(trainer, path):
    from fairseq_distill.user_errors import find_user_error

    with pytest.raises(Exception) as raised:
        trainer.load_checkpoint(str(path))
    error = find_user_error(raised.value)
    assert error is not None, repr(raised.value)
    return str(error)


def test_resuming_with_another_ckd_form_is_refused_naming_it(tiny_data, deep_teacher, tmp_path):
    """issue 49.6: the paper form's teacher-side map and the released form's student-side map
    are different parameters; a resume under the other --ckd-form must not read one as the
    other, at equal widths as where they differ. The checkpoint records the form."""
    from helpers import train_argv, transformer_flags
    from fairseq_distill.trainer_setup import build_training

    for width in (24, 16):  # the teacher's width (deep_teacher: d = 24), and a narrower student
        def trainer_with(*options):
            argv = train_argv(tiny_data, "--task", "translation_distill", "--teacher-path", deep_teacher,
                              "--layer-map", "1,2", "--save-dir", str(tmp_path), *options, criterion="ckd",
                              model=transformer_flags(1, 1, width, 48))
            return build_training(argv)[-1]

        path = tmp_path / f"paper-{width}.pt"
        save_after_one_step(trainer_with("--ckd-form", "paper"), path)
        message = resume_error(trainer_with(), path)  # today's default: released
        assert "trained with --ckd-form paper" in message and "this run uses --ckd-form released" in message
        assert "resume with --ckd-form paper" in message
        # with the form it was trained with, it resumes
        trainer_with("--ckd-form", "paper").load_checkpoint(str(path))


def test_resuming_a_checkpoint_without_criterion_parameters(tiny_data, deep_teacher, tmp_path):
    """issue 49: a word_kd checkpoint resumed with ckd (whose map has parameters): fairseq hands
    the criterion None. Without --reset-optimizer: one line naming it; with it, the map starts
    afresh and the run goes on."""
    from helpers import train_argv, transformer_flags
    from fairseq_distill.trainer_setup import build_training

    def trainer_with(criterion, *options):
        argv = train_argv(tiny_data, "--task", "translation_distill", "--teacher-path", deep_teacher,
                          "--save-dir", str(tmp_path), *options, criterion=criterion,
                          model=transformer_flags(1, 1, 24, 48))
        return build_training(argv)[-1]

    path = tmp_path / "word_kd.pt"
    save_after_one_step(trainer_with("word_kd"), path)
    for criterion, options in (("ckd", ()), ("ckd", ("--ckd-form", "paper")),
                               ("distill", ("--distill-terms", "word_kd,ckd"))):
        message = resume_error(trainer_with(criterion, *options), path)
        assert "the checkpoint has no parameters for this run's" in message
        assert "resume with --reset-optimizer" in message
    trainer = trainer_with("ckd", "--reset-optimizer")
    trainer.load_checkpoint(str(path), reset_optimizer=True)
    trainer.train_step([first_batch(trainer.task)])
