"""Exports of the plugin's own architectures say that decoding needs --user-dir, and do decode with it."""
import os
import re
import sys

import pytest

from helpers import PACKAGE_DIR, REPO, TRAIN_FLAGS, python_module, run

FIXTURES = os.path.join(REPO, "tests", "fixtures", "v0_1_checkpoints")
DATA = os.path.join(FIXTURES, "data-bin")


@pytest.mark.slow
def test_deep_transformer_export_names_the_plugin_requirement_and_decodes_with_it(tmp_path):
    run(python_module("fairseq_cli.train", DATA, "--user-dir", PACKAGE_DIR, *TRAIN_FLAGS,
                      "--arch", "deep_transformer_tiny", "--share-all-embeddings", "--max-update", "1",
                      "--save-dir", str(tmp_path / "ck"), "--criterion", "label_smoothed_cross_entropy"))
    export = os.path.join(os.path.dirname(sys.executable), "fsd-export-student")
    student = str(tmp_path / "student.pt")
    out = run([export, str(tmp_path / "ck" / "checkpoint_last.pt"), student]).stdout
    assert "deep_transformer_tiny is an architecture of this plugin" in out
    assert '--user-dir "$(fsd-options --user-dir)"' in out
    generate = ["fairseq_cli.generate", DATA, "--path", student, "--gen-subset", "valid", "--beam", "1",
                "--max-len-b", "5", "--cpu"]
    with_plugin = run(python_module(*generate, "--user-dir", PACKAGE_DIR)).stdout
    assert re.search(r"Translated [1-9]\d* sentences", with_plugin)
    # what docs/deploy.md tells users they will see without it
    without = run(python_module(*generate), check=False)
    assert without.returncode != 0 and "KeyError: \"'no_progress_bar'\"" in without.stdout


@pytest.mark.slow
def test_transformer_export_says_it_needs_nothing(tmp_path):
    export = os.path.join(os.path.dirname(sys.executable), "fsd-export-student")
    out = run([export, os.path.join(FIXTURES, "teacher.pt"), str(tmp_path / "t.pt")]).stdout
    assert "stock fairseq-generate loads it without --user-dir" in out
