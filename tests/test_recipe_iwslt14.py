"""recipes/iwslt14_de_en end to end, offline: prepare.sh on a synthetic archive of the official
layout, then run.sh --smoke (every stage at a toy size on the CPU); each stage runs exactly the
command --dry-run printed, and the results table is written."""
import json
import os
import subprocess
import sys

import pytest

from helpers import REPO
from iwslt14_archive import write_archive

pytestmark = pytest.mark.slow  # bash recipes running fairseq-train and the fsd-* commands

RECIPE = os.path.join(REPO, "recipes", "iwslt14_de_en")


def bash(script, *args):
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    proc = subprocess.run(["bash", os.path.join(RECIPE, script), *args], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, env=env, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-4000:]
    return proc.stdout


def commands(output):
    return [line for line in output.splitlines() if line.startswith("+ ")]


def count(path):
    with open(path, encoding="utf-8") as f:
        return sum(1 for _ in f)


def test_prepare_and_smoke_run_end_to_end(tmp_path):
    archive = write_archive(tmp_path / "de-en.tgz", pairs=230)
    out = tmp_path / "work"
    printed = bash("prepare.sh", "--archive", str(archive), "--out", str(out), "--no-checksum")
    counts = json.load(open(out / "text" / "counts.json"))["lines"]
    # 230 talk lines + 23 metadata blocks of 2 kept lines: 276 pairs, every 23rd to valid
    assert counts["cleaned"] == {"de": 276, "en": 276}
    assert counts["valid"] == {"de": 12, "en": 12} and counts["train"] == {"de": 264, "en": 264}
    for split, n in (("train", 264), ("valid", 12), ("test", 14)):
        for lang in ("de", "en"):
            assert count(out / "text" / f"{split}.{lang}") == n
            assert count(out / "data" / "raw" / f"{split}.{lang}") == n  # what was binarized, aligned
    meta = json.load(open(out / "data" / "bin" / "fairseq_distill.json"))
    assert meta["bpe"] == "subword_nmt" and meta["sizes"] == {"train": 264, "valid": 12, "test": 14}
    assert "[prepare] done in" in printed

    # every row's command at a dry run; a few rows run, one per data path and one reading the
    # teacher's states: the teacher cache (word-level KD), the seq-KD data, attention KD (layer KD's
    # rows read the teacher as A2D's do; their terms' CLI runs are tests/test_layer_kd_cli.py)
    every = commands(bash("run.sh", "--smoke", "--dry-run", "--out", str(out)))
    rows_file = tmp_path / "rows.tsv"
    with open(os.path.join(RECIPE, "rows.tsv"), encoding="utf-8") as f:
        lines = [line for line in f if line.startswith(("word-kd-3\t", "seq-kd-3\t", "a2d-3-released\t"))]
    rows_file.write_text("".join(lines), encoding="utf-8")
    rows = [line.split("\t")[0] for line in lines]
    planned = commands(bash("run.sh", "--smoke", "--dry-run", "--out", str(out), "--rows", str(rows_file)))
    assert {c for c in planned if "fsd-benchmark-score table" not in c} <= set(every) and len(rows) == 3
    all_rows = [line for line in open(os.path.join(RECIPE, "rows.tsv"), encoding="utf-8")
                if line.strip() and not line.startswith("#")]
    assert len([c for c in every if c.startswith("+ fairseq-train")]) == 1 + len(all_rows) == 15
    assert not (out / "runs").exists()  # --dry-run ran nothing
    ran = bash("run.sh", "--smoke", "--out", str(out), "--rows", str(rows_file))
    assert commands(ran) == planned  # each stage ran exactly what --dry-run printed
    trainings = [c for c in planned if c.startswith("+ fairseq-train")]
    assert len(trainings) == 1 + len(rows)  # the teacher and every row
    assert any("--teacher-cache" in c for c in trainings) and any(f"{out}/seqkd " in c for c in trainings)

    table = json.load(open(out / "results.json"))
    assert [r["name"] for r in table["rows"]] == ["teacher"] + rows
    assert all(r["measured"] and r["measured"]["sentences"] == 14 for r in table["rows"])
    markdown = open(out / "results.md", encoding="utf-8").read()
    assert "not yet measured" not in markdown
    assert "| a2d-3-released | 3+3 | 4 | original | a2d | `--a2d-released` | 37.17 |" in markdown
    assert "Paper BLEU form: A2D's: sacreBLEU (default tokenizer)" in markdown

    again = bash("run.sh", "--smoke", "--out", str(out), "--stage", "students", "--rows", str(rows_file))
    assert not any(c.startswith("+ fairseq-train") for c in commands(again))  # finished rows are kept
    assert "[students] a2d-3-released done" in again


def test_recipe_options_are_checked(tmp_path):
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    # on GPUs: data-parallel training with --fp16, and the seq-KD data one shard per GPU, then merged
    planned = commands(bash("run.sh", "--dry-run", "--gpus", "2", "--out", str(tmp_path)))
    assert all("--distributed-world-size 2 --fp16" in c for c in planned if c.startswith("+ fairseq-train"))
    seqkd = [c for c in planned if "fsd-seqkd" in c]
    assert [c.split("fsd-seqkd")[0] for c in seqkd] == ["+ env CUDA_VISIBLE_DEVICES=0 ", "+ env CUDA_VISIBLE_DEVICES=1 ", "+ "]
    assert seqkd[0].endswith("--num-shards 2 --shard-id 0  &") and seqkd[2].endswith("--num-shards 2 --merge ")
    assert "--no-fp16" not in planned[0] and "--fp16" not in commands(
        bash("run.sh", "--dry-run", "--gpus", "2", "--no-fp16", "--out", str(tmp_path)))[0]
    for args, message in ((["--stage", "teachers"], "unknown --stage 'teachers'; valid: teacher cache seqkd"),
                          (["--gpus", "two"], "--gpus must be a number of GPUs"),
                          (["--frobnicate"], "unknown option '--frobnicate'")):
        proc = subprocess.run(["bash", os.path.join(RECIPE, "run.sh"), *args], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, env=env, cwd=REPO)
        assert proc.returncode == 2 and message in proc.stdout, proc.stdout
    proc = subprocess.run(["bash", os.path.join(RECIPE, "prepare.sh"), "--archive", "/nonexistent.tgz"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=REPO)
    assert proc.returncode == 1 and "--archive /nonexistent.tgz does not exist" in proc.stdout


def test_a_bad_rows_file_is_refused_when_run_sh_starts_naming_file_line_and_valid_values(tmp_path):
    """issue 49.8: a data-column typo trained on the original data; spaces for tabs or a missing
    column failed only at the students stage, in fairseq's argparse dump."""
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    good = "no-kd-3\t3\toriginal\tlabel_smoothed_cross_entropy\t-\t4\t36.24"
    cases = [
        ("seq-kd", "no-kd-3\t3\tseq-kd\tword_kd\t-\t4\t36.24", "line 2 (no-kd-3): data 'seq-kd'; valid: original, seqkd"),
        ("spaces", "no-kd-3 3 original word_kd - 4 36.24", "line 2 has 1 tab-separated column(s), not 7"),
        ("short", "no-kd-3\t3\toriginal\tword_kd\t4\t36.24", "line 2 has 6 tab-separated column(s), not 7"),
        ("criterion", "x\t3\toriginal\tword-kd\t-\t4\t1", "line 2 (x): criterion 'word-kd'; valid: label_smoothed_cross_entropy, word_kd"),
        ("heads", "x\t3\toriginal\tword_kd\t-\tfour\t1", "line 2 (x): heads 'four': a number"),
        ("twice", good, "line 2: the name 'no-kd-3' is used by an earlier row"),
    ]
    for label, row, message in cases:
        rows = tmp_path / f"{label}.tsv"
        rows.write_text(f"{good}\n{row}\n" if label == "twice" else f"# a comment\n{row}\n")
        for extra in ([], ["--dry-run"]):
            proc = subprocess.run(["bash", os.path.join(RECIPE, "run.sh"), "--rows", str(rows), "--out",
                                   str(tmp_path / "w"), *extra], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, env=env, cwd=REPO)
            assert proc.returncode == 2 and f"run.sh: --rows {rows} {message}" in proc.stdout, (label, proc.stdout)
            assert "fairseq-train" not in proc.stdout
