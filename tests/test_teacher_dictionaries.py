"""A teacher is checked against the data's dictionaries wherever it is paired with data, from
any working directory; a teacher whose dictionaries cannot be found is refused unless the
user accepts a size-only check."""
import os
import shutil
import sys

import pytest

from helpers import REPO, TINY_MODEL, TRAIN_FLAGS, build, run
from fairseq_distill.errors import DistillError

FIXTURE_DATA = os.path.join(REPO, "tests", "fixtures", "v0_1_checkpoints", "data-bin")


@pytest.fixture(scope="module")
def stock_teacher(tmp_path_factory):
    """A teacher trained by stock fairseq (no plugin: no dictionaries in the checkpoint) with
    relative --data and --save-dir, from its own working directory."""
    work = tmp_path_factory.mktemp("teacher_work")
    shutil.copytree(FIXTURE_DATA, work / "bin")
    run([sys.executable, "-m", "fairseq_cli.train", "bin", *TRAIN_FLAGS, *TINY_MODEL, "--max-update", "1",
         "--save-dir", "runs/teacher", "--criterion", "label_smoothed_cross_entropy"], cwd=str(work))
    return work


@pytest.fixture(scope="module")
def other_dictionary(tmp_path_factory):
    """The same data binarized with a dictionary of the same size whose symbols 4 and 5 are swapped."""
    out = tmp_path_factory.mktemp("other_dict") / "bin"
    shutil.copytree(FIXTURE_DATA, out)
    for lang in ("de", "en"):
        lines = (out / f"dict.{lang}.txt").read_text(encoding="utf-8").splitlines(keepends=True)
        lines[0], lines[1] = lines[1], lines[0]  # file line 1 is symbol 4 (after bos/pad/eos/unk)
        (out / f"dict.{lang}.txt").write_text("".join(lines), encoding="utf-8")
    return str(out)


def teacher_task(data, teacher, *extra):
    cfg, task, _ = build(data, "--task", "translation_distill", "--teacher-path", teacher, *extra)
    return cfg, task


def test_wrong_teacher_is_caught_from_another_working_directory(stock_teacher, other_dictionary, tmp_path,
                                                                monkeypatch):
    teacher = str(stock_teacher / "runs" / "teacher" / "checkpoint_last.pt")
    monkeypatch.chdir(tmp_path)  # the teacher's relative data path means nothing here
    cfg, task = teacher_task(other_dictionary, teacher)
    with pytest.raises(DistillError, match="its source dictionary differs from the student's at index 4"):
        task.build_criterion(cfg.criterion)
    cfg, task = teacher_task(FIXTURE_DATA, teacher)  # the right data passes
    task.build_criterion(cfg.criterion)
    assert len(task.teacher) == 1


def test_teacher_without_findable_dictionaries_needs_explicit_consent(stock_teacher, tmp_path, monkeypatch):
    moved = tmp_path / "moved"
    shutil.copytree(stock_teacher / "runs", moved)  # its data directory is not beside it any more
    teacher = str(moved / "teacher" / "checkpoint_last.pt")
    monkeypatch.chdir(tmp_path)
    cfg, task = teacher_task(FIXTURE_DATA, teacher)
    with pytest.raises(DistillError, match="its dictionaries cannot be found.*--allow-size-only-dictionary-check"):
        task.build_criterion(cfg.criterion)
    cfg, task = teacher_task(FIXTURE_DATA, teacher, "--allow-size-only-dictionary-check")
    task.build_criterion(cfg.criterion)
    assert len(task.teacher) == 1


def test_seqkd_refuses_a_teacher_of_other_dictionaries(stock_teacher, other_dictionary, tmp_path):
    teacher = str(stock_teacher / "runs" / "teacher" / "checkpoint_last.pt")
    fsd_seqkd = os.path.join(os.path.dirname(sys.executable), "fsd-seqkd")
    proc = run([fsd_seqkd, "--teacher", teacher, "--data", other_dictionary, "--out", str(tmp_path / "out"),
                "--source-lang", "de", "--target-lang", "en", "--beam", "1"], cwd=str(tmp_path), check=False)
    assert proc.returncode == 1, proc.stdout
    assert "Traceback" not in proc.stdout
    assert "its source dictionary differs from the student's at index 4" in proc.stdout
    assert not (tmp_path / "out").exists()
