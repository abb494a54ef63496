"""The recipe runner behind the demo and the benchmarks (bench/run.py, bench/runner/):
results, table, cache, the commands it runs, what it shows."""
import glob
import json
import math
import os
import re
import shlex
import sys

import pytest
import torch
import yaml
from scipy import stats as scipy_stats

from helpers import REPO, run, tiny_recipe

sys.path.insert(0, REPO)  # the runner lives in the checkout's bench/, not in the package


def recipe_cmd(config, *args):
    return [sys.executable, os.path.join(REPO, "bench", "run.py"), str(config), *args]


def in_workdir(row: dict, workdir) -> dict:
    """A results row with its paths (relative to the work dir, as results keep them) made
    absolute again, to open the files a run left there."""
    return {k: os.path.join(str(workdir), v) if k in ("checkpoint", "training_checkpoint", "data_bin", "cache_dir")
            and isinstance(v, str) and not os.path.isabs(v) else v for k, v in row.items()}


def step_logs(workdir) -> str:
    """Every step's full log: the tools' output the runner keeps out of the terminal."""
    return "".join(open(p, encoding="utf-8").read() for p in sorted(glob.glob(f"{workdir}/runs/*/step.log")))


def printed_blocks(printed: str) -> dict:
    """step name -> its argv lists, from the output of --print-commands."""
    blocks = dict(re.findall(r"\n# step (\S+)\n(.*?)(?=\n\n|\Z)", printed, re.S))
    return {name: [shlex.split(line) for line in block.strip().split("\n")] for name, block in blocks.items()}


def executed(workdir) -> dict:
    """step name -> the argv lists the runner executed for it (kept in its record)."""
    found = {}
    for path in glob.glob(f"{workdir}/runs/*/record.json"):
        record = json.load(open(path))
        found[record["name"]] = record["commands"]
    return found

TINY = {"encoder-layers": 1, "decoder-layers": 1, "encoder-embed-dim": 16, "decoder-embed-dim": 16,
        "encoder-ffn-embed-dim": 32, "decoder-ffn-embed-dim": 32, "encoder-attention-heads": 2,
        "decoder-attention-heads": 2, "arch": "transformer"}


def check_paired_significance(results: dict, table: str):
    """``compare: {baseline: [STEP, ...]}`` (here teacher and student-seqkd-wordkd): every other
    row against each, sacreBLEU's paired bootstrap on the saved hypotheses, in the results JSON
    and under the table."""
    tested, reverse = results["significance"]
    assert tested["baseline"] == "teacher" and tested["test"] == "bootstrap" and tested["samples"] == 1000
    assert list(tested["systems"]) == ["student-seqkd-wordkd", "student-cached"]
    assert reverse["baseline"] == "student-seqkd-wordkd" and list(reverse["systems"]) == ["teacher", "student-cached"]
    assert reverse["systems"]["teacher"]["bleu"]["delta"] == -tested["systems"]["student-seqkd-wordkd"]["bleu"]["delta"]
    student = tested["systems"]["student-seqkd-wordkd"]
    rows = {r["name"]: r for r in results["rows"]}
    assert student["bleu"]["score"] == rows["student-seqkd-wordkd"]["bleu"]
    assert student["bleu"]["baseline"] == rows["teacher"]["bleu"]
    assert set(student) == {"bleu", "chrf", "chrf++"} and 0 < student["chrf"]["p_value"] <= 1
    assert "hypotheses" not in rows["teacher"]  # machine paths stay in the work dir's records
    assert f"| student-seqkd-wordkd | {student['bleu']['score']:.2f}" in table
    assert "Paired bootstrap test against teacher (1000 samples, seed 12345)" in table
    assert "Paired bootstrap test against student-seqkd-wordkd (1000 samples, seed 12345)" in table


@pytest.mark.slow
def test_recipe_runs_caches_and_reports(tmp_path):
    config = tiny_recipe(tmp_path, "tiny", {"teacher": TINY, "student": TINY}, [
        {"name": "teacher", "model": "teacher"},
        {"name": "seqkd-data", "seqkd": {"teacher": "teacher", "beam": 1, "max-len-b": 6,
                                         "on-missing": "reference"}},
        {"name": "student-seqkd-wordkd", "model": "student", "data": "seqkd-data",
         "teacher": "teacher", "criterion": "word_kd", "criterion-args": {"kd-weight": 0.5}},
        # the teacher cached once on the seq-KD data, and a student reading the cache
        {"name": "cache", "cache": {"teacher": "teacher", "data": "seqkd-data", "top-k": 4}},
        {"name": "student-cached", "model": "student", "data": "seqkd-data", "teacher-cache": "cache",
         "criterion": "word_kd", "criterion-args": {"kd-weight": 0.5}},
    ])
    cfg = yaml.safe_load(config.read_text())
    cfg["compare"] = {"baseline": ["teacher", "student-seqkd-wordkd"]}
    config.write_text(yaml.safe_dump(cfg))
    cmd = recipe_cmd(config, "--workdir", str(tmp_path / "work"), "--results", str(tmp_path / "results"))
    out = run(cmd).stdout
    assert "word_kd_loss" in out  # fairseq's progress output is shown
    # one line per epoch of each training step (not a terminal: no in-place updates), with its losses
    assert re.search(r"\[3/5\] student-seqkd-wordkd: epoch 1: loss [\d.]+, .*word_kd_loss [\d.]+; valid loss [\d.]+", out), out
    assert "INFO" not in out and "Warning" not in out  # the tools' full output is in the step logs
    assert "| 1+1, 16, 32 |" in out and "student-seqkd-wordkd: " in out and "/model.pt" in out  # table, checkpoints
    assert "fairseq_cli.train" in step_logs(tmp_path / "work")

    results = json.load(open(tmp_path / "results" / "tiny.json"))
    rows = {r["name"]: in_workdir(r, tmp_path / "work") for r in results["rows"]}
    assert set(rows) == {"teacher", "student-seqkd-wordkd", "student-cached"}
    student = rows["student-seqkd-wordkd"]
    assert student["updates"] == 6 and student["teacher"] == "teacher" and student["data"] == "seqkd-data"
    assert student["trained_updates"] == 6  # the run's own count (here also the evaluated checkpoint's)
    assert student["parameters"] > 0 and 0 <= student["bleu"] <= 100 and student["train_seconds"] > 0
    assert results["seqkd"][0]["sentences"] == 300
    cache = results["caches"][0]
    assert (cache["top_k"], cache["sentences"], cache["data"]) == (4, 300, "seqkd-data") and cache["bytes"] > 0
    cached = rows["student-cached"]
    assert cached["teacher_cache"] == "cache" and cached["teacher"] is None and cached["updates"] == 6
    assert "--teacher-cache" in sum(executed(tmp_path / "work")["student-cached"], [])
    table = open(tmp_path / "results" / "tiny.md").read()
    assert re.search(r"\| student-seqkd-wordkd \| 1\+1, 16, 32 \| 0\.\d\dM \| word_kd \(kd-weight=0.5\) \| "
                     r"seqkd-data \| 1 \| 6 \|", table), table
    check_paired_significance(results, table)

    # a record written before runs kept their own update count gets it from its last checkpoint
    record_path = os.path.join(os.path.dirname(student["checkpoint"]), "record.json")
    record = json.load(open(record_path))
    del record["trained_updates"]
    json.dump(record, open(record_path, "w"))

    # a second run reuses every finished step
    again = run(cmd).stdout
    assert json.load(open(record_path))["trained_updates"] == 6
    assert again.count(": cached (") == 5
    assert "fairseq_cli.train" not in again
    # --only runs a part of the recipe; the results still list every finished step
    run(cmd + ["--only", "teacher"])
    after = json.load(open(tmp_path / "results" / "tiny.json"))
    assert [r["name"] for r in after["rows"]] == ["teacher", "student-seqkd-wordkd", "student-cached"]
    table = open(tmp_path / "results" / "tiny.md").read()
    assert "Teacher caches" in table and re.search(r"\| seqkd-data \| fairseq \| 1 \| 1 \| 300 \| \d+ s \|", table)
    # the decoding checkpoints of finished runs exist and are clean
    assert os.path.isfile(student["checkpoint"])


DEEP = {**TINY, "arch": "deep_transformer", "encoder-layers": 4, "decoder-layers": 2,
        "encoder-group-size": 2, "decoder-group-size": 2}
SHALLOW = {**TINY, "arch": "deep_transformer", "encoder-layers": 2, "decoder-layers": 1}


@pytest.mark.slow
def test_recipe_gpkd_pipeline_and_two_stage_training(tmp_path):
    """teacher with group permutation -> stage 2 with skipping -> seq-KD data -> extracted student."""
    config = tiny_recipe(tmp_path, "gpkd-tiny", {"teacher": DEEP, "student": SHALLOW}, [
        {"name": "teacher", "model": "teacher"},
        {"name": "teacher-skip", "model": "teacher", "continue": "teacher",
         "train": {"skip-sublayer-rate": 0.4, "max-update": 7}},
        {"name": "seqkd-data", "seqkd": {"teacher": "teacher", "beam": 1, "max-len-b": 6,
                                         "on-missing": "reference"}},
        {"name": "student-gpkd", "model": "student", "data": "seqkd-data",
         "init": {"from": "teacher", "keep": "top"}},
        {"name": "teacher-finetuned", "model": "teacher", "finetune": "teacher-skip",
         "train": {"max-update": 2}},
    ], n_train=200, **{"max-update": 4})
    out = run(recipe_cmd(config, "--workdir", str(tmp_path / "work"), "--results", str(tmp_path / "results"))).stdout
    out += step_logs(tmp_path / "work")  # the tools' output
    # stage 2 starts from stage 1's last checkpoint: its update count goes on from 4 to 7
    assert re.search(r"--restore-file \S+/teacher-\w+/checkpoints/checkpoint_last\.pt --reset-dataloader "
                     r"--reset-meters", out)
    assert "[extract] encoder: kept 2 of 4 layers: [2, 4]" in out and "[extract] decoder: kept 1 of 2 layers: [2]" in out
    rows = {r["name"]: in_workdir(r, tmp_path / "work") for r in json.load(open(tmp_path / "results" / "gpkd-tiny.json"))["rows"]}
    assert rows["teacher"]["updates"] == 4 and rows["teacher-skip"]["updates"] == 7
    assert rows["student-gpkd"]["updates"] == 4 and rows["student-gpkd"]["shape"]["encoder-layers"] == 2
    # fine-tuning starts from the weights only: a fresh update count
    assert re.search(r"--finetune-from-model \S+/teacher-skip-\w+/checkpoints/checkpoint_last\.pt", out)
    assert "loading pretrained model from" in out and rows["teacher-finetuned"]["updates"] == 2
    table = open(tmp_path / "results" / "gpkd-tiny.md").read()
    assert "init: layers of teacher (keep top)" in table and "continues teacher" in table
    assert "from teacher-skip's weights" in table and "states its own train time" in table
    # a run's train time is its own: fairseq's cumulative time, less that of the checkpoint it started from
    # (fairseq carries it over even with --finetune-from-model); the extracted student starts at 0
    def cumulative(name):
        state = torch.load(rows[name]["training_checkpoint"], map_location="cpu", weights_only=False)
        return state["extra_state"]["previous_training_time"]

    for name, parent in (("teacher-skip", "teacher"), ("teacher-finetuned", "teacher-skip"), ("student-gpkd", None)):
        own = cumulative(name) - (cumulative(parent) if parent else 0.0)
        assert rows[name]["train_seconds"] == pytest.approx(own, abs=0.06), name

    # --print-commands shows, without running anything, exactly what the runner ran
    printed = run(recipe_cmd(config, "--workdir", str(tmp_path / "work"), "--print-commands")).stdout
    blocks = dict(re.findall(r"\n# step (\S+)\n(.*?)(?=\n\n|\Z)", printed, re.S))
    assert list(blocks) == ["teacher", "teacher-skip", "seqkd-data", "student-gpkd", "teacher-finetuned"]
    # one source of truth: the runner executed exactly the argv lists it prints, step by step
    assert executed(tmp_path / "work") == printed_blocks(printed)
    for name in ("teacher", "teacher-skip", "student-gpkd", "teacher-finetuned"):
        train_line = [line for line in blocks[name].split("\n") if line.startswith("fairseq-train ")]
        assert len(train_line) == 1, blocks[name]
        stepdir = os.path.dirname(os.path.dirname(rows[name]["training_checkpoint"]))
        log = open(os.path.join(stepdir, "step.log")).read().split("\n")
        ran = log[log.index("$ " + train_line[0]) + 1].split()
        assert ran[:2] == ["#", "run"] and ran[4:6] == ["-m", "fairseq_cli.train"], name
        assert shlex.split(" ".join(ran[6:])) == shlex.split(train_line[0])[1:], name
    extraction = blocks["student-gpkd"].split("\n")[0].split()
    assert extraction[0] == "fsd-extract-student" and extraction[1] == rows["teacher"]["checkpoint"]
    assert extraction[3:] == ["--encoder-keep", "top", "--decoder-keep", "top", "--seed", "1"]
    seqkd = blocks["seqkd-data"].split()
    assert seqkd[0] == "fsd-seqkd" and seqkd[seqkd.index("--teacher") + 1] == rows["teacher"]["checkpoint"]
    export, evaluate = blocks["student-gpkd"].split("\n")[2:]
    assert export.split()[1:] == [rows["student-gpkd"]["training_checkpoint"].replace("last", "best"),
                                  rows["student-gpkd"]["checkpoint"]]
    assert evaluate.split()[:2] == ["fsd-evaluate", rows["student-gpkd"]["checkpoint"]]
    assert "--beam 1 --batch-size 64" in evaluate  # the recipe's eval settings
    # printing prepares and writes nothing
    run(recipe_cmd(config, "--workdir", str(tmp_path / "fresh"), "--print-commands"))
    assert not os.path.exists(tmp_path / "fresh")


def test_extends_inherits_settings_merges_models_and_selects_base_steps(tmp_path):
    from fairseq_distill.errors import DistillError
    from bench.runner.config import load_recipe
    import pytest

    base = {"name": "base", "seed": 3, "train": {"lr": 0.1}, "models": {"teacher": {"a": 1}, "student": {"b": 2}},
            "steps": [{"name": "teacher", "model": "teacher"}, {"name": "student", "model": "student"}]}
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base))
    child = {"name": "child", "extends": "base.yaml", "base_steps": ["teacher"],
             "models": {"student": {"b": 5}, "wide": {"c": 3}},
             "steps": [{"name": "wide", "model": "wide", "teacher": "teacher"}]}
    (tmp_path / "child.yaml").write_text(yaml.safe_dump(child))
    cfg = load_recipe(str(tmp_path / "child.yaml"))
    assert cfg["name"] == "child" and cfg["seed"] == 3 and cfg["train"] == {"lr": 0.1}
    assert cfg["models"] == {"teacher": {"a": 1}, "student": {"b": 5}, "wide": {"c": 3}}
    assert [s["name"] for s in cfg["steps"]] == ["teacher", "wide"]

    child["base_steps"] = ["teachr"]
    (tmp_path / "child.yaml").write_text(yaml.safe_dump(child))
    with pytest.raises(DistillError, match=r"base_steps \['teachr'\] are not steps of .*base.yaml; its steps are \['teacher', 'student'\]"):
        load_recipe(str(tmp_path / "child.yaml"))


def test_compare_names_one_or_more_baselines_and_refuses_unknown_ones():
    from fairseq_distill.errors import DistillError
    from bench.runner.config import compared_baselines

    steps = [{"name": "student"}, {"name": "student-wordkd"}, {"name": "a2d"}]
    assert compared_baselines(None, steps) == []
    assert compared_baselines({"baseline": "student"}, steps) == ["student"]
    assert compared_baselines({"baseline": ["student", "student-wordkd"], "test": "randomization"},
                              steps) == ["student", "student-wordkd"]
    with pytest.raises(DistillError, match=r"baseline 'student-kd' is not a step of this recipe; "
                                           r"steps: student, student-wordkd, a2d"):
        compared_baselines({"baseline": ["student", "student-kd"]}, steps)
    with pytest.raises(DistillError, match=r"unknown key\(s\) baselines; valid: baseline, test"):
        compared_baselines({"baselines": ["student"]}, steps)
    with pytest.raises(DistillError, match="needs 'baseline: STEP'"):
        compared_baselines({"test": "bootstrap"}, steps)


def test_table_marks_rows_trained_under_another_speed_setup():
    from bench.runner.host import SPEED_SETUP
    from bench.runner.results import markdown_table

    row = {"name": "old", "shape": {"encoder-layers": 2, "decoder-layers": 2, "encoder-embed-dim": 64,
                                    "encoder-ffn-embed-dim": 256},
           "parameters": 750000, "criterion": "word_kd", "teacher": "t", "data": "original", "epochs": 10,
           "updates": 1350, "train_seconds": 2004.0, "bleu": 26.51, "tokens_per_second": 2623.0}
    new = {**row, "name": "new", "train_seconds": 930.0, "speed_setup": SPEED_SETUP}
    table = markdown_table([row, new])
    assert "| old | 2+2, 64, 256 | 0.75M | word_kd | original | 10 | 1350 | 33.4 min † | 26.51 | 2623 |" in table
    assert "| new | 2+2, 64, 256 | 0.75M | word_kd | original | 10 | 1350 | 15.5 min | 26.51 | 2623 |" in table
    assert table.count(" † |") == 1 and "compare its train time only with other † rows" in table
    # one set-up throughout: nothing to mark
    assert "†" not in markdown_table([row]) and "†" not in markdown_table([new])


def test_table_says_when_the_evaluated_checkpoint_is_not_the_runs_last_update():
    """A run evaluated at checkpoint_best.pt that trained on past it (validation loss rose)
    lists its trained updates and the evaluated checkpoint's, not the latter as the budget."""
    from bench.runner.results import markdown_table

    row = {"name": "ld", "shape": {"encoder-layers": 12, "decoder-layers": 6, "encoder-embed-dim": 128,
                                   "encoder-ffn-embed-dim": 512},
           "parameters": 4990000, "criterion": "label_smoothed_cross_entropy", "teacher": None,
           "data": "seqkd-data", "epochs": 21, "updates": 1584, "trained_updates": 2660,
           "train_seconds": 2976.0, "bleu": 37.23, "tokens_per_second": 1396.0}
    table = markdown_table([row])
    assert "| seqkd-data | 21 | 2660 (evaluated: 1584) | 49.6 min |" in table
    assert "evaluated checkpoint's update" in table
    # best = last, or a record from before trained updates were kept: one number, no note
    for same in ({**row, "trained_updates": 1584}, {k: v for k, v in row.items() if k != "trained_updates"}):
        assert "| 21 | 1584 | 49.6 min |" in markdown_table([same])
        assert "evaluated checkpoint's update" not in markdown_table([same])


def test_table_marks_rows_made_from_another_run_of_their_teacher():
    """A retrained teacher (same recipe and seed, other weights) does not silently pair with
    rows that were trained against its earlier run."""
    from bench.runner.results import markdown_table

    shape = {"encoder-layers": 2, "decoder-layers": 2, "encoder-embed-dim": 64, "encoder-ffn-embed-dim": 256}
    base = {"shape": shape, "parameters": 750000, "data": "original", "epochs": 10, "updates": 1350,
            "train_seconds": 900.0, "tokens_per_second": 2500.0, "speed_setup": "x"}
    teacher = {**base, "name": "teacher", "criterion": "label_smoothed_cross_entropy", "teacher": None,
               "bleu": 37.11, "run": "aaaa", "committed_bleu": 37.03, "uses": {}}
    old = {**base, "name": "old-kd", "criterion": "word_kd", "teacher": "teacher", "bleu": 26.51}  # no run record
    new = {**base, "name": "new-kd", "criterion": "a2d", "teacher": "teacher", "bleu": 25.0,
           "run": "bbbb", "uses": {"teacher": "aaaa"}}
    other = {**new, "name": "other-kd", "uses": {"teacher": "cccc"}}
    table = markdown_table([teacher, old, new, other])
    assert "| old-kd ‡ |" in table and "| other-kd ‡ |" in table
    assert "| new-kd |" in table and "| teacher |" in table
    assert "‡ made from another run of teacher than the row in this table (old-kd: teacher; other-kd: teacher)" in table
    assert "teacher was retrained with the same recipe and seed and scored 37.11; the run the ‡ rows used scored 37.03" in table
    # tables from before fingerprints (no run anywhere) and consistent tables mark nothing
    legacy_teacher = {k: v for k, v in teacher.items() if k not in ("run", "committed_bleu", "uses")}
    assert "‡" not in markdown_table([legacy_teacher, old])
    assert "‡" not in markdown_table([teacher, new])
    # seq-KD data count too: a row on data from another seq-KD run is marked
    on_data = {**base, "name": "on-seqkd", "criterion": "label_smoothed_cross_entropy", "teacher": None,
               "data": "seqkd-data", "bleu": 27.0, "run": "dddd", "uses": {"seqkd-data": "eeee"}}
    assert "| on-seqkd ‡ |" in markdown_table([teacher, on_data], {"teacher": "aaaa", "seqkd-data": "ffff"})
    assert "‡" not in markdown_table([teacher, on_data], {"teacher": "aaaa", "seqkd-data": "eeee"})


def test_a_recipes_own_committed_table_wins_over_another_tables_row(tmp_path):
    """Two committed tables hold the same step (name and key) from different runs, e.g. a
    teacher one recipe retrained: the recipe reuses the row of its own table."""
    import json

    from bench.runner.records import committed_rows

    rows = {"a.json": 37.03, "mine.json": 37.11, "z.json": 36.0}
    for file, bleu in rows.items():
        (tmp_path / file).write_text(json.dumps({"rows": [{"name": "teacher", "key": "k1", "bleu": bleu},
                                                          {"name": "other", "key": "stale", "bleu": 1.0}]}))
    paths = [str(tmp_path / f) for f in sorted(rows)]
    for order in (paths, paths[::-1]):
        found = committed_rows(order, {"teacher": "k1", "other": "k2"}, "mine")
        assert found["teacher"]["bleu"] == 37.11
        assert "other" not in found  # a key that does not match is not reused


def test_results_keep_each_rows_test_output_for_paired_tests_in_a_later_session(tmp_path):
    """A session's work dir does not outlive it: each row's hypotheses and references are
    written beside the results, and a committed row read back (--reuse) is paired-tested from
    those copies against a row run later, as if both had run in one session."""
    from bench.runner.records import committed_rows
    from bench.runner.results import write_results
    from fairseq_distill.evaluation.scoring import corpus_scores

    refs = ["a small dog runs on the grass .", "two men sit on a bench .", "a girl in a red coat waves ."] * 4
    (tmp_path / "test.en").write_text("\n".join(refs) + "\n")
    shape = {"encoder-layers": 2, "decoder-layers": 2, "encoder-embed-dim": 64, "encoder-ffn-embed-dim": 256}

    def record(name, hypotheses):
        (tmp_path / f"{name}.hyp.txt").write_text("\n".join(hypotheses) + "\n")
        return {"kind": "train", "name": name, "key": f"key-{name}", "shape": shape, "parameters": 750000,
                "criterion": "label_smoothed_cross_entropy", "data": "original", "epochs": 10,
                "updates": 1350, "train_seconds": 900.0, "tokens_per_second": 2500.0,
                "bleu": corpus_scores(hypotheses, refs)["bleu"], "beam": 4,
                "hypotheses": str(tmp_path / f"{name}.hyp.txt"), "references": str(tmp_path / "test.en")}

    base_hyps = ["a dog runs on grass .", "two men sit .", "a girl waves ."] * 4
    new_hyps = ["a small dog runs on the grass .", "two men sit on a bench .", "a girl in red waves ."] * 4
    steps = [{"name": "base"}, {"name": "new"}]
    results = tmp_path / "results"
    args = (str(results), "r", str(tmp_path / "r.yaml"), "best", steps)
    write_results(*args, {"base": record("base", base_hyps)}, {"baseline": "base"})
    row = json.load(open(results / "r.json"))["rows"][0]
    assert row["hypotheses_file"] == "hypotheses/r/base.txt" and "hypotheses" not in row
    assert (results / row["hypotheses_file"]).read_text() == "\n".join(base_hyps) + "\n"
    assert row["references_file"].startswith("hypotheses/r/references-")
    assert (results / row["references_file"]).read_text() == "\n".join(refs) + "\n"

    # the next session: the work dir is gone, the committed row is reused and a new row runs
    os.remove(tmp_path / "base.hyp.txt")
    reused = committed_rows([str(results / "r.json")], {"base": "key-base", "new": "key-new"}, "r")["base"]
    write_results(*args, {"base": reused, "new": record("new", new_hyps)}, {"baseline": "base"})
    meta = json.load(open(results / "r.json"))
    (tested,) = meta["significance"]
    assert tested["baseline"] == "base" and tested["not_tested"] == []
    bleu = tested["systems"]["new"]["bleu"]
    assert bleu["baseline"] == corpus_scores(base_hyps, refs)["bleu"]
    assert bleu["delta"] == pytest.approx(corpus_scores(new_hyps, refs)["bleu"] - bleu["baseline"], abs=0.011)
    assert sorted(os.listdir(results / "hypotheses" / "r")) == ["base.txt", "new.txt", os.path.basename(row["references_file"])]
    assert (results / "hypotheses" / "r" / "base.txt").read_text() == "\n".join(base_hyps) + "\n"

    # a row that leaves the table takes its file along; a record without files names none
    without = {k: v for k, v in record("old", base_hyps).items() if k not in ("hypotheses", "references")}
    write_results(*args[:4], [{"name": "old"}], {"old": without})
    assert os.listdir(results / "hypotheses" / "r") == []
    assert "hypotheses_file" not in json.load(open(results / "r.json"))["rows"][0]


def test_a_committed_row_later_in_the_recipe_keeps_its_test_output_while_earlier_steps_run(tmp_path, monkeypatch):
    """--reuse-committed with a step to run before a committed row: the results written after the
    first step keep the committed row and its hypotheses, so the paired tests at the end find them."""
    import hashlib
    import io

    from bench.runner import records as runner_records
    from bench.runner.execute import Runner
    from bench.runner.progress import Terminal

    config = tiny_recipe(tmp_path, "later", {"student": TINY}, [{"name": "new", "model": "student"},
                                                                 {"name": "base", "model": "student"}])
    with open(config) as f:
        cfg = yaml.safe_load(f)
    cfg["compare"] = {"baseline": "base"}
    with open(config, "w") as f:
        yaml.safe_dump(cfg, f)
    refs = ["a dog runs .", "two men sit .", "a girl waves ."] * 4
    results = tmp_path / "results"
    (results / "hypotheses" / "later").mkdir(parents=True)
    (results / "hypotheses" / "later" / "base.txt").write_text("\n".join(["a dog .", "men sit .", "a girl ."] * 4) + "\n")
    text = "\n".join(refs) + "\n"
    references = f"references-{hashlib.sha1(text.encode()).hexdigest()[:10]}.txt"  # named as committed ones are
    (results / "hypotheses" / "later" / references).write_text(text)
    (tmp_path / "refs.txt").write_text("\n".join(refs) + "\n")
    (tmp_path / "new.txt").write_text("\n".join(refs) + "\n")
    shape = {"encoder-layers": 1, "decoder-layers": 1, "encoder-embed-dim": 16, "encoder-ffn-embed-dim": 32}
    row = {"kind": "train", "shape": shape, "parameters": 1000, "criterion": "label_smoothed_cross_entropy",
           "data": "original", "epochs": 1, "updates": 3, "train_seconds": 1.0, "tokens_per_second": 1.0,
           "beam": 4, "checkpoint": "/elsewhere/checkpoint_best.pt"}
    said = io.StringIO()
    runner = Runner(str(config), str(tmp_path / "work"), str(results), terminal=Terminal(said),
                    reuse=[str(results / "later.json")])
    (results / "later.json").write_text(json.dumps({"rows": [
        {**row, "name": "base", "key": runner.plan.keys["base"], "bleu": 10.0,
         "hypotheses_file": "hypotheses/later/base.txt", "references_file": f"hypotheses/later/{references}"}]}))
    monkeypatch.setattr(runner, "prepare_data", lambda: None)
    monkeypatch.setattr(runner_records, "save", lambda *a: None)
    monkeypatch.setattr(runner, "run_step", lambda step, label: {
        **row, "name": step["name"], "key": runner.plan.keys[step["name"]], "bleu": 100.0,
        "hypotheses": str(tmp_path / "new.txt"), "references": str(tmp_path / "refs.txt")})
    runner.run()
    meta = json.load(open(results / "later.json"))
    assert [r["name"] for r in meta["rows"]] == ["new", "base"]
    assert (results / "hypotheses" / "later" / "base.txt").is_file()
    (tested,) = meta["significance"]
    assert tested["baseline"] == "base" and tested["not_tested"] == [] and "new" in tested["systems"]


def test_the_closing_lines_list_only_checkpoints_on_this_machine(tmp_path):
    """Rows taken from the committed results name checkpoints of the machine that made them:
    the runner does not list those paths as checkpoints to decode with."""
    import io

    from bench.runner.execute import Runner
    from bench.runner.progress import Terminal

    config = tiny_recipe(tmp_path, "where", {"student": TINY}, [{"name": "a", "model": "student"},
                                                                 {"name": "b", "model": "student"}])
    out = io.StringIO()
    runner = Runner(str(config), str(tmp_path / "work"), str(tmp_path / "results"), terminal=Terminal(out))
    (tmp_path / "a.pt").write_bytes(b"")
    runner.done = {"a": {"kind": "train", "checkpoint": str(tmp_path / "a.pt")},
                   "b": {"kind": "train", "checkpoint": "/elsewhere/runs/b-0123456789/model.pt"}}
    runner.say_where()
    text = out.getvalue()
    assert f"  a: {tmp_path / 'a.pt'}" in text and "/elsewhere" not in text
    assert "no checkpoint here (rows taken from the committed results): b" in text


@pytest.mark.slow
def test_switching_the_evaluated_checkpoint_reevaluates_without_retraining(tmp_path):
    """``eval: {checkpoint: last}`` evaluates the end of the budget instead of checkpoint_best.pt;
    switching it on a finished recipe re-exports and re-evaluates, and trains nothing."""
    # 60 sentences make a few updates an epoch, so 6 updates are several epochs; best = the epoch of
    # *highest* validation loss, an early one while the loss falls
    config = tiny_recipe(tmp_path, "select", {"teacher": TINY}, [{"name": "teacher", "model": "teacher"}],
                         n_train=60, **{"best-checkpoint-metric": "loss", "maximize-best-checkpoint-metric": True})
    cmd = recipe_cmd(config, "--workdir", str(tmp_path / "work"), "--results", str(tmp_path / "results"))
    out = run(cmd).stdout + step_logs(tmp_path / "work")
    losses = [float(v) for v in re.findall(r"valid on 'valid' subset \| loss ([\d.]+)", out)]
    assert len(losses) >= 2 and losses[-1] < max(losses), out  # so checkpoint_best.pt is not the last
    first = json.load(open(tmp_path / "results" / "select.json"))["rows"][0]
    assert first["evaluated_checkpoint"] == "best" and 0 < first["updates"] < 6

    cfg = yaml.safe_load(config.read_text())
    cfg["eval"]["checkpoint"] = "last"
    config.write_text(yaml.safe_dump(cfg))
    trained = step_logs(tmp_path / "work").count("fairseq_cli.train")
    again = run(cmd).stdout
    assert "fairseq_cli.train" not in again and "teacher: evaluating checkpoint_last.pt" in again
    assert step_logs(tmp_path / "work").count("fairseq_cli.train") == trained  # nothing trained again
    row = in_workdir(json.load(open(tmp_path / "results" / "select.json"))["rows"][0], tmp_path / "work")
    assert row["evaluated_checkpoint"] == "last" and row["updates"] == 6 and row["key"] == first["key"]
    assert row["run"] != first["run"]  # another model was exported
    exported = torch.load(row["checkpoint"], map_location="cpu", weights_only=False)
    last = torch.load(row["training_checkpoint"], map_location="cpu", weights_only=False)
    for name, tensor in last["model"].items():
        assert torch.equal(exported["model"][name], tensor), name
    assert "last checkpoint (checkpoint_last.pt" in open(tmp_path / "results" / "select.md").read()

    cfg["eval"]["checkpoint"] = "newest"
    config.write_text(yaml.safe_dump(cfg))
    bad = run(cmd, check=False)
    assert bad.returncode != 0 and "eval checkpoint 'newest' is not one of 'best', 'last'" in bad.stdout


@pytest.mark.slow
def test_a_failing_step_shows_the_end_of_its_log_and_where_the_log_is(tmp_path):
    # flags fairseq-train's parser accepts, a model it cannot build (16 is not divisible by 3 heads)
    config = tiny_recipe(tmp_path, "broken", {"bad": {**TINY, "encoder-attention-heads": 3}},
                         [{"name": "broken", "model": "bad"}])
    proc = run(recipe_cmd(config, "--workdir", str(tmp_path / "work"), "--results", str(tmp_path / "results")),
               check=False)
    assert proc.returncode == 1, proc.stdout
    out = proc.stdout
    assert re.search(r"\[1/1\] broken: fairseq-train failed \(exit status \d+\); the last lines of its log:", out), out
    log = re.search(r"full log: (\S+/runs/broken-\w+/step\.log)", out).group(1)
    shown = out.split("the last lines of its log:\n")[1].split("\nfull log:")[0]
    assert "divisible by num_heads" in shown
    assert shown.split("\n") == open(log).read().rstrip("\n").split("\n")[-30:]


# the demo's step keys when the runner lived in fairseq_distill/recipe.py (the demo has no
# committed results to compare with): existing work/demo directories stay recognised
DEMO_KEYS = {"teacher": "dda9ff0456", "seqkd-data": "aae9b508d2", "student": "a56220d4c7",
             "student-wordkd": "fe960c497e", "student-seqkd-wordkd": "bea67a7cd3"}


def test_cache_keys_recognise_the_committed_results_and_existing_work_dirs():
    """Every row of the committed results is found again by its recipe's step key: a change
    of how keys are computed would make the runner retrain (and not reuse) all of them."""
    from bench.runner.schema import load_checked
    from bench.runner.plan import Plan

    checked = 0
    for config in sorted(glob.glob(os.path.join(REPO, "configs", "*.yaml"))):
        plan = Plan(load_checked(config), config, "/nonexistent")
        results = os.path.join(REPO, "bench", "results", f"{plan.name}.json")
        if plan.name == "demo":
            assert plan.keys == DEMO_KEYS
            continue
        if not os.path.isfile(results):
            continue  # a recipe not measured yet
        meta = json.load(open(results))
        for row in meta["rows"] + meta["seqkd"]:
            if row["name"] not in plan.keys:
                continue  # a step the recipe dropped (its loss changed); its row awaits re-measuring
            assert plan.keys[row["name"]] == row["key"], (config, row["name"])
            checked += 1
    assert checked >= 35


FAIRSEQ_TRAIN_OUTPUT = """\
2026-11-24 21:54:12 | INFO | fairseq_cli.train | task: TranslationTask
2026-11-24 21:54:13 | INFO | train_inner | epoch 001:      2 / 12 loss=8.1, nll_loss=8.0, num_updates=2
2026-11-24 21:54:14 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 7.5 | nll_loss 7.4 | ppl 169 | num_updates 12
2026-11-24 21:54:14 | INFO | train | epoch 001 | loss 7.9 | nll_loss 7.85 | kd_loss 0.5 | ppl 230 | num_updates 12 | wall 9
"""


class FakeStream:
    def __init__(self, tty):
        self.tty, self.text = tty, ""

    def isatty(self):
        return self.tty

    def write(self, text):
        self.text += text

    def flush(self):
        pass


@pytest.mark.parametrize("tty", [False, True])
def test_training_progress_shows_epochs_and_their_losses(tty):
    """One line per epoch with its losses; on a terminal, progress within an epoch in place."""
    from bench.runner.progress import CountProgress, Terminal, TrainingProgress

    stream = FakeStream(tty)
    terminal = Terminal(stream)
    follow = TrainingProgress(terminal, "[1/2] teacher", max_epoch=5)
    for line in FAIRSEQ_TRAIN_OUTPUT.splitlines(keepends=True):
        follow(line)
    CountProgress(terminal, "[1/2] teacher")("decode test:  45%|####5     | 9/20 [00:01<00:01, 8.1sent/s]\n")
    terminal.say("[1/2] teacher: done")
    epoch = re.escape("[1/2] teacher: epoch 1/5: loss 7.9, nll_loss 7.85, kd_loss 0.5; valid loss 7.5 (") + r"\d+s\)\n"
    if tty:
        assert re.fullmatch(r"\r\x1b\[K\[1/2\] teacher: epoch 1/5, 2/12 batches \(\d+s\)\r\x1b\[K" + epoch
                            + r"\r\x1b\[K\[1/2\] teacher: decode test 9/20 \(\d+s\)\r\x1b\[K\[1/2\] teacher: done\n",
                            stream.text), repr(stream.text)
    else:  # a pipe or a file: whole lines only
        assert re.fullmatch(epoch + re.escape("[1/2] teacher: done\n"), stream.text), repr(stream.text)


STOPPED_RUNNER = """
import os, sys
sys.path.insert(0, {repo!r})
from bench.runner import execute
# the tool: a child that says its pid, then works for a minute
execute.runnable = lambda argv: [sys.executable, "-c",
                                 "import os, time; print(os.getpid(), flush=True); time.sleep(60)"]
execute.stop_children_on_sigterm()
execute.run_tool(["fairseq-train"], "[1/1] step", {log!r})
"""


@pytest.mark.slow
def test_a_terminated_runner_stops_the_tool_it_runs(tmp_path):
    """``kill RUNNER`` (SIGTERM) must not leave its fairseq-train running on, unseen: an
    orphaned training keeps the cores busy beside the next one, its log lost."""
    import signal
    import subprocess
    import time

    log = tmp_path / "step.log"
    runner = subprocess.Popen([sys.executable, "-c", STOPPED_RUNNER.format(repo=REPO, log=str(log))])
    deadline = time.time() + 60
    while not re.search(r"^\d+$", log.read_text() if log.exists() else "", re.M):
        assert runner.poll() is None and time.time() < deadline, "the tool never started"
        time.sleep(0.1)
    child = int(re.search(r"^(\d+)$", log.read_text(), re.M).group(1))
    runner.send_signal(signal.SIGTERM)
    assert runner.wait(timeout=30) == 128 + signal.SIGTERM
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)  # gone, and reaped (a zombie would still answer)


def test_seqkd_table_gives_the_speed_ratio_to_fairseq_of_the_same_teacher_and_settings():
    """issue 36: the ratio divides the fairseq row's decode time (same teacher, beam, n-best and
    selection) by each row's; merge time and re-decoded sentences are shown, '-' where not recorded."""
    from bench.runner.results import seqkd_table

    def row(name, backend, seconds, nbest=1, teacher="t1", **more):
        return {"name": name, "backend": backend, "beam": 4, "nbest": nbest, "select": "chrf", "sentences": 1000,
                "decode_seconds": seconds, "uses": {"teacher": teacher}, **more}

    table = seqkd_table([
        row("fs", "fairseq", 300.0, merge_seconds=9.4, redecoded_with_fairseq=0),
        row("ct2", "ctranslate2", 100.0, compute_type="int8", merge_seconds=10.0, redecoded_with_fairseq=265,
            targets_bleu=31.456, targets_chrf=55.0),
        row("fs4", "fairseq", 330.0, nbest=4),
        row("ct4", "ctranslate2", 110.0, nbest=4),
        row("other-teacher", "ctranslate2", 50.0, teacher="t2"),
        row("reselected", "fairseq", None, nbest=4, select="mbr", shards_kept=1),
    ])
    cells = {line.split(" | ")[0].strip("| "): line.split(" | ") for line in table.splitlines()[4:]}
    assert cells["fs"][6] == "1.00" and cells["ct2"][6] == "3.00" and cells["ct4"][6] == "3.00"
    assert cells["other-teacher"][6] == "-"  # no fairseq row of that teacher
    assert cells["ct2"][9] == "10 s" and cells["ct2"][12] == "265" and cells["fs4"][9] == "-"
    # the targets' own scores against the references, '-' where not recorded
    assert cells["ct2"][13] == "31.46, 55.00 |" and cells["fs"][13] == "- |"
    # its shard decoded by another step: no time, no ratio, no rate
    assert cells["reselected"][5:8] == ["shards kept", "-", "-"]


def test_results_caption_names_the_decoding_settings_that_change_the_score():
    from bench.runner.results import decoding_settings, recipe_caption

    row = {"name": "a", "beam": 5, "lenpen": 0.6, "max_len_a": 1.2, "max_len_b": 10}
    meta = {"recipe": "r", "config": "configs/r.yaml", "machine": {"device": "cpu", "cpu_threads": 2},
            "rows": [row, dict(row)]}
    caption = recipe_caption(meta, "best")
    assert "beam 5, length penalty 0.6, length limit 1.2·source + 10 tokens; cpu, 2 threads" in caption
    assert "checkpoint_best.pt" in caption
    one = recipe_caption({**meta, "machine": {"device": "cpu", "cpu_threads": 1}}, "best")
    assert "; cpu, 1 thread; " in one  # not "1 threads"
    assert "differ between rows" in decoding_settings([row, {**row, "name": "b", "lenpen": 1.0}])
    assert decoding_settings([{"name": "old", "beam": 4}]).startswith("beam 4 (length penalty and length limit not recorded")
    mixed = decoding_settings([{**row, "name": "new"}, {"name": "old", "beam": 5}])
    assert mixed == "beam 5, length penalty 0.6, length limit 1.2·source + 10 tokens (not recorded for old: evaluated before they were)"


def test_an_analysis_made_from_another_run_of_the_same_step_is_not_current(tmp_path, capsys):
    """A retrained run keeps its cache key (same recipe and seed) but not its weights: a depth
    grid or speed table made from its earlier run must be measured again, not reused."""
    from types import SimpleNamespace

    from bench.analysis import is_current, made_from

    recipe = SimpleNamespace(keys={"teacher": "k1", "student": "k2"},
                             done={"teacher": {"run": "aaaa"}, "student": {"run": "bbbb"}})
    inputs = made_from(recipe, ["teacher", "student"], beam=4)
    path = tmp_path / "grid.json"
    path.write_text(json.dumps({"rows": [], "inputs": inputs}))
    assert is_current(str(path), made_from(recipe, ["teacher", "student"], beam=4))
    assert "current: made from the same runs (teacher, student)" in capsys.readouterr().out
    assert not is_current(str(path), made_from(recipe, ["teacher", "student"], beam=1))
    assert not is_current(str(path), made_from(recipe, ["teacher", "student"], beam=4), force=True)
    retrained = SimpleNamespace(keys=recipe.keys, done={**recipe.done, "teacher": {"run": "cccc"}})
    assert not is_current(str(path), made_from(retrained, ["teacher", "student"], beam=4))
    # results stored before runs were fingerprinted name keys only: measured again
    path.write_text(json.dumps({"rows": [], "inputs": {"runs": recipe.keys, "options": {"beam": 4}}}))
    assert not is_current(str(path), made_from(recipe, ["teacher", "student"], beam=4))


# -- recipe validation (issue 32.2 and 32.5): every key checked when the recipe loads --------------

def demo_variant(tmp_path, edit):
    """A copy of configs/demo.yaml changed by ``edit(cfg)``, as a path."""
    cfg = yaml.safe_load(open(os.path.join(REPO, "configs", "demo.yaml")))
    edit(cfg)
    path = tmp_path / "variant.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return str(path)


def step_named(cfg, name):
    return next(s for s in cfg["steps"] if s["name"] == name)


@pytest.mark.parametrize("edit,message", [
    (lambda c: c.update(evel={"beam": 9}), r"unknown key 'evel' at the top level; did you mean 'eval'\?"),
    (lambda c: step_named(c, "student-wordkd").update({"criterion-arg": step_named(c, "student-wordkd").pop("criterion-args")}),
     r"step 'student-wordkd': unknown key 'criterion-arg'; did you mean 'criterion-args'\?"),
    (lambda c: c["eval"].update(bem=9), r"eval: unknown key 'bem'; did you mean 'beam'\?"),
    (lambda c: c["data"].update(vocab=300), r"data: unknown key 'vocab'; did you mean 'vocab_size'\?"),
    (lambda c: step_named(c, "seqkd-data")["seqkd"].update(bem=4),
     r"step 'seqkd-data': seqkd option 'bem' is not an option of fsd-seqkd; did you mean 'beam'\?"),
    (lambda c: step_named(c, "student").update(model="studnet"),
     r"step 'student': model 'studnet' is not in models: teacher, student; did you mean 'student'\?"),
    (lambda c: step_named(c, "student-wordkd").update(teacher="teachr"),
     r"step 'student-wordkd' uses step 'teachr' \(teacher\), which is not a step of the recipe; did you mean 'teacher'\?"),
    (lambda c: step_named(c, "teacher").update(teacher="teacher"),
     r"step 'teacher' uses itself \(teacher\)"),
    (lambda c: (step_named(c, "teacher").update(teacher="student-wordkd")),
     r"steps depend on each other in a cycle: teacher -> student-wordkd -> teacher"),
])
def test_a_misspelled_or_dangling_recipe_key_is_named_when_the_recipe_loads(tmp_path, edit, message):
    from bench.runner.schema import load_checked
    from fairseq_distill.errors import DistillError

    with pytest.raises(DistillError, match=message):
        load_checked(demo_variant(tmp_path, edit))


def test_steps_may_come_before_the_steps_they_use(tmp_path):
    from bench.runner.schema import load_checked
    from bench.runner.plan import Plan

    def move_teacher_last(cfg):
        cfg["steps"].append(cfg["steps"].pop(0))
    cfg = load_checked(demo_variant(tmp_path, move_teacher_last))
    names = [s["name"] for s in cfg["steps"]]
    assert names.index("teacher") < names.index("seqkd-data") < names.index("student-seqkd-wordkd")
    # the same keys as in recipe order: nothing else changes
    plan = Plan(cfg, "configs/demo.yaml", "/nonexistent")
    assert plan.keys == DEMO_KEYS


def test_train_flags_are_checked_against_fairseq_train_before_anything_runs(tmp_path):
    from bench.runner.schema import load_checked
    from bench.runner.plan import Plan
    from bench.runner.schema import check_train_flags
    from fairseq_distill.errors import DistillError

    def misspell(cfg):
        step_named(cfg, "teacher")["train"] = {"max-epoh": 4}
    path = demo_variant(tmp_path, misspell)
    with pytest.raises(DistillError, match=r"step 'teacher': --max-epoh is not a fairseq-train option "
                                           r"\(with the plugin and criterion label_smoothed_cross_entropy\); "
                                           r"did you mean --max-epoch\?"):
        check_train_flags(Plan(load_checked(path), path, "/nonexistent"))

    def bad_criterion_arg(cfg):
        step_named(cfg, "student-wordkd")["criterion-args"] = {"kd-weigth": 0.5}
    path = demo_variant(tmp_path, bad_criterion_arg)
    with pytest.raises(DistillError, match=r"step 'student-wordkd': --kd-weigth is not a fairseq-train option "
                                           r"\(with the plugin and criterion word_kd\); did you mean --kd-weight\?"):
        check_train_flags(Plan(load_checked(path), path, "/nonexistent"))
    # every committed recipe passes
    for config in sorted(glob.glob(os.path.join(REPO, "configs", "*.yaml"))):
        check_train_flags(Plan(load_checked(config), config, "/nonexistent"))


# -- several seeds (issue 31) -------------------------------------------------------------------

def test_a_step_with_seeds_runs_once_per_seed_and_keeps_its_own_key_for_the_recipe_seed(tmp_path):
    from bench.runner.schema import load_checked
    from bench.runner.plan import Plan
    from fairseq_distill.errors import DistillError

    def seeded(cfg):
        step_named(cfg, "student")["seeds"] = [1, 2, 3]
    path = demo_variant(tmp_path, seeded)
    cfg = load_checked(path)
    names = [s["name"] for s in cfg["steps"]]
    assert names[names.index("student"):names.index("student") + 3] == ["student", "student-seed2", "student-seed3"]
    plan = Plan(cfg, path, "/nonexistent")
    assert plan.keys["student"] == DEMO_KEYS["student"]  # seed 1 is the step as it was
    assert len({plan.keys[n] for n in ("student", "student-seed2", "student-seed3")}) == 3
    assert [plan.train_options(plan.by_name[n])["seed"] for n in ("student", "student-seed3")] == [1, 3]
    for bad, message in (([1, 1], "distinct integers"), ([2, 3], "must include the recipe's seed 1"), ("1", "a list")):
        with pytest.raises(DistillError, match=message):
            load_checked(demo_variant(tmp_path, lambda c: step_named(c, "student").update(seeds=bad)))


def test_results_written_after_each_step_keep_every_finished_row(tmp_path, monkeypatch):
    """``--only STEP`` on a recipe with finished steps after STEP: the results written when
    STEP finishes (what an interrupted benchmark leaves) list every finished row, not only the
    steps before it."""
    from bench.runner import execute

    finished = {"teacher": {"kind": "train"}, "seqkd-data": {"kind": "seqkd"},
                "student-wordkd": {"kind": "train"}, "student-seqkd-wordkd": {"kind": "train"}}
    for record in finished.values():
        record.update(checkpoint="/nonexistent/model.pt", evaluated_checkpoint="best")
    written = []
    monkeypatch.setattr(execute.records, "local_records", lambda plan: dict(finished))
    monkeypatch.setattr(execute.records, "save", lambda plan, step, record: None)
    monkeypatch.setattr(execute.Runner, "prepare_data", lambda self: None)
    monkeypatch.setattr(execute.Runner, "run_step", lambda self, step, label: {
        "kind": "train", "checkpoint": "/nonexistent/student.pt", "evaluated_checkpoint": "best"})
    monkeypatch.setattr(execute, "write_results", lambda *args, **kw: written.append(list(args[5])) or "")
    runner = execute.Runner(demo_variant(tmp_path, lambda cfg: None), str(tmp_path / "work"),
                            str(tmp_path / "results"), only=["student"])
    runner.run()
    every = ["teacher", "seqkd-data", "student", "student-wordkd", "student-seqkd-wordkd"]  # recipe order
    assert written == [every, every]  # after the step, and at the end


def test_seeded_rows_get_mean_sd_per_seed_tests_and_a_verdict(tmp_path):
    """By hand: BLEU 20, 22, 24 -> mean 22, sd 2; a system equal to its references on every seed
    beats a baseline that is wrong on every line, in every seed and pooled: 'better'."""
    from bench.runner.seeds import seeds_markdown, seeds_summary, verdict

    refs = [f"ein satz nummer {i} mit einigen woertern darin" for i in range(30)]
    (tmp_path / "refs.txt").write_text("\n".join(refs) + "\n")
    (tmp_path / "good.txt").write_text("\n".join(refs) + "\n")
    (tmp_path / "bad.txt").write_text("\n".join("voellig anderer text hier" for _ in refs) + "\n")
    steps = [{"name": "base", "model": "s"}, {"name": "base-seed2", "model": "s", "seed": 2, "seed_of": "base"},
             {"name": "kd", "model": "s"}, {"name": "kd-seed2", "model": "s", "seed": 2, "seed_of": "kd"}]
    def record(bleu, chrf, hyp):
        return {"bleu": bleu, "chrf": chrf, "hypotheses": str(tmp_path / hyp), "references": str(tmp_path / "refs.txt")}
    done = {"base": record(20.0, 40.0, "bad.txt"), "base-seed2": record(24.0, 44.0, "bad.txt"),
            "kd": record(30.0, 50.0, "good.txt"), "kd-seed2": record(32.0, 51.0, "good.txt")}
    summary = seeds_summary(steps, done, ["base"])
    assert summary["rows"]["base"]["bleu"] == {"values": [20.0, 24.0], "mean": 22.0, "sd": 2.83}
    (c,) = summary["comparisons"]
    assert c["seeds"] == [1, 2] and c["verdict"] == "better" and c["pooled"]["bleu"]["p_value"] < 0.05
    assert all(s["bleu"]["delta"] > 90 for s in c["per_seed"])
    assert verdict([0.5, -0.1, 0.3], 0.001) == "tie" and verdict([-1, -2], 0.01) == "worse"
    assert verdict([1, 2, 3], 0.2) == "tie"
    # Welch's t by hand: (31 - 22) / sqrt(8/2 + 2/2) = 4.02 on (4 + 1)^2 / (4^2 + 1^2) = 25/17 df
    t, df = 9 / math.sqrt(5), 25 / 17
    assert c["welch_bleu"]["t"] == 4.02
    assert c["welch_bleu"]["p_value"] == pytest.approx(2 * scipy_stats.t.sf(t, df), abs=1e-4)
    assert 0.05 < c["welch_bleu"]["p_value"] < 0.5  # two seeds a side: little power
    table = "\n".join(seeds_markdown(summary))
    assert "| base | 1, 2 | 20.00, 24.00 | 22.00 ± 2.83 |" in table and "| better |" in table
    assert f"| +4.02 ({c['welch_bleu']['p_value']:.3f}) | better |" in table


def test_no_verdict_before_every_planned_seed_has_run(tmp_path):
    """A recipe run in order (seed 1 of every row first) has rows with one of their three seeds
    done: the rule 'every seed agrees and the pooled test says p < 0.05' would call one seed's
    significant difference 'better'. Until both rows have all their seeds the verdict is pending,
    and says how many seeds it has."""
    from bench.runner.seeds import seeds_markdown, seeds_summary

    refs = [f"ein satz nummer {i} mit einigen woertern darin" for i in range(30)]
    (tmp_path / "refs.txt").write_text("\n".join(refs) + "\n")
    (tmp_path / "good.txt").write_text("\n".join(refs) + "\n")
    (tmp_path / "bad.txt").write_text("\n".join("voellig anderer text hier" for _ in refs) + "\n")
    steps = [{"name": n, "model": "s"} for n in ("base", "kd")] + [
        {"name": f"{n}-seed{k}", "model": "s", "seed": k, "seed_of": n} for n in ("base", "kd") for k in (2, 3)]
    def record(hyp):
        return {"bleu": 30.0, "chrf": 50.0, "hypotheses": str(tmp_path / hyp), "references": str(tmp_path / "refs.txt")}
    done = {"base": record("bad.txt"), "kd": record("good.txt")}
    (c,) = seeds_summary(steps, done, ["base"])["comparisons"]
    assert c["seeds"] == [1] and c["pooled"]["bleu"]["p_value"] < 0.05
    assert c["verdict"] == "pending (1 of 3 seeds)"
    done.update({"base-seed2": record("bad.txt"), "kd-seed2": record("good.txt"), "base-seed3": record("bad.txt")})
    (c,) = seeds_summary(steps, done, ["base"])["comparisons"]
    assert c["verdict"] == "pending (2 of 3 seeds)"
    done["kd-seed3"] = record("good.txt")
    summary = seeds_summary(steps, done, ["base"])
    assert summary["comparisons"][0]["verdict"] == "better"
    assert "| better |" in "\n".join(seeds_markdown(summary))


def test_seeds_made_from_another_teacher_run_or_cpu_are_named_and_unshared_pairs_marked(tmp_path):
    """A teacher retrained between seeds (a lost work dir, another machine): the seeds table says
    which seeds used which teacher run and CPU, and marks a compared pair of seeds that did not
    use the same teacher run; seeds that differ only in the seed get no note."""
    from bench.runner.seeds import seeds_markdown, seeds_summary

    refs = [f"ein satz nummer {i} mit einigen woertern darin" for i in range(30)]
    (tmp_path / "refs.txt").write_text("\n".join(refs) + "\n")
    steps = [{"name": n, "model": "s"} for n in ("base", "kd")] + [
        {"name": f"{n}-seed{k}", "model": "s", "seed": k, "seed_of": n} for n in ("base", "kd") for k in (2, 3)]
    def record(teacher, cpu):
        return {"bleu": 30.0, "chrf": 50.0, "hypotheses": str(tmp_path / "refs.txt"),
                "references": str(tmp_path / "refs.txt"), "uses": {"teacher": teacher}, "cpu": cpu}
    done = {"base": record("t1", "Xeon"), "base-seed2": record("t1", "Xeon"), "base-seed3": record("t2", "EPYC"),
            "kd": record("t1", "Xeon"), "kd-seed2": record("t1", "Xeon"), "kd-seed3": record("t3", "EPYC")}
    summary = seeds_summary(steps, done, ["base"])
    assert summary["rows"]["kd"]["seeds_differ"] == {
        "runs": {"teacher": {"1": "t1", "2": "t1", "3": "t3"}}, "cpus": {"1": "Xeon", "2": "Xeon", "3": "EPYC"}}
    (c,) = summary["comparisons"]
    assert [s.get("unshared") for s in c["per_seed"]] == [None, None, ["teacher"]]
    table = "\n".join(seeds_markdown(summary))
    assert "| kd | base | +0.00 (0.001); +0.00 (0.001); +0.00 (0.001) ‡ |" in table
    assert ("kd: teacher run (seeds 1, 2: t1; seed 3: t3); CPU (seeds 1, 2: Xeon; seed 3: EPYC)" in table
            and "base: teacher run (seeds 1, 2: t1; seed 3: t2)" in table)
    assert "kd against base, seed 3 (teacher)" in table
    done["kd-seed3"] = record("t2", "EPYC")  # every pair shares its teacher run: no mark
    table = "\n".join(seeds_markdown(seeds_summary(steps, done, ["base"])))
    assert "‡" not in table and "kd: teacher run (seeds 1, 2: t1; seed 3: t2)" in table
    for name in done:
        done[name].update(uses={"teacher": "t1"}, cpu="Xeon")  # only the seed differs: no note
    assert "differ in more than the seed" not in "\n".join(seeds_markdown(seeds_summary(steps, done, ["base"])))


def test_a_value_fairseq_train_refuses_is_named_before_anything_runs(tmp_path):
    from bench.runner.schema import load_checked
    from bench.runner.plan import Plan
    from bench.runner.schema import check_train_flags
    from fairseq_distill.errors import DistillError

    path = demo_variant(tmp_path, lambda c: c["models"]["student"].update(arch="no_such_arch"))
    with pytest.raises(DistillError, match=r"step 'student': fairseq-train refuses its flags: argument --arch/-a: "
                                           r"invalid choice: 'no_such_arch'"):
        check_train_flags(Plan(load_checked(path), path, "/nonexistent"))


def test_the_runner_keeps_library_warnings_in_each_steps_log(monkeypatch):
    """issue 32.10: the plugin silences library deprecation warnings, except where a log file
    takes the tool's whole output: the runner's step.log (its terminal shows progress lines)."""
    import logging
    import warnings

    from bench.runner.execute import tool_env
    from fairseq_distill import quiet

    assert tool_env(["fairseq-train"])[quiet.SHOW_ENV] == "1"
    monkeypatch.setenv(quiet.SHOW_ENV, "1")
    logger = logging.getLogger("fairseq.tasks.text_to_speech")
    monkeypatch.setattr(logger, "filters", [])
    with warnings.catch_warnings():
        quiet.install()
        assert not logger.filters
    monkeypatch.delenv(quiet.SHOW_ENV)
    with warnings.catch_warnings():
        quiet.install()
        assert any(isinstance(f, quiet.DropMessage) for f in logger.filters)


def test_an_external_seqkd_step_exports_the_teacher_and_teaches_it_as_a_pretrained_model():
    """configs/external_teacher.yaml (issue 35's measurement): ``external: true`` exports the
    teacher with fsd-export-ctranslate2 and passes the export to --teacher-ctranslate2; the
    other seq-KD step is the ctranslate2 backend on the checkpoint, with the same options."""
    from bench.runner.schema import load_checked
    from bench.runner.plan import Plan

    plan = Plan(load_checked(os.path.join(REPO, "configs", "external_teacher.yaml")),
                "configs/external_teacher.yaml", "/work")
    assert plan.keys["teacher"] == DEMO_KEYS["teacher"] and plan.keys["student"] == DEMO_KEYS["student"]
    external, backend = plan.commands(plan.by_name["seqkd-external"]), plan.commands(plan.by_name["seqkd-backend"])
    teacher = plan.output_of("teacher", "checkpoint")
    exported = os.path.join(plan.step_dir(plan.by_name["seqkd-external"]), "teacher-ctranslate2")
    assert external[0] == ["fsd-export-ctranslate2", teacher, plan.data_bin, exported, "--quantization", "float32",
                           "--force"]
    assert external[1][:3] == ["fsd-seqkd", "--teacher-ctranslate2", exported] and "--external" not in external[1]
    assert backend == [["fsd-seqkd", "--teacher", teacher, *backend[0][3:]]]
    # the same decoding options, but for the backend switch
    options = lambda argv: [a for a in argv[argv.index("--work") + 2:] if a not in ("--backend", "ctranslate2")]
    assert options(external[1]) == options(backend[0]) == ["--beam", "4", "--batch-size", "128", "--compute-type",
                                                          "int8", "--threads", "2"]


def test_paired_tests_are_kept_per_pair_and_tested_again_only_when_an_input_changes(tmp_path, monkeypatch):
    """Results are rewritten after every step; each (baseline, system) pair's paired test is kept
    in the work dir and reused. That is sound because sacreBLEU tests each system on its own
    resamples: a pair tested alone gives what it gives among others."""
    from bench.runner import paired_tests as kept
    from fairseq_distill.evaluation.scoring import paired_significance

    refs = [f"ein satz nummer {i} mit einigen woertern darin" for i in range(40)]
    base = ("base", [r if i % 3 else "ganz anders" for i, r in enumerate(refs)])
    a = ("a", [r if i % 4 else "etwas anders hier" for i, r in enumerate(refs)])
    b = ("b", [r if i % 5 else r.replace("satz", "text") for i, r in enumerate(refs)])
    both = paired_significance(base, [a, b], refs)
    asked = []

    def counted(baseline, systems, references, test):
        asked.append([name for name, _ in systems])
        return paired_significance(baseline, systems, references, test)

    monkeypatch.setattr(kept, "paired_significance", counted)
    keep = str(tmp_path / "paired-tests")
    alone = kept.paired_tests(base, [a], refs, keep_dir=keep)
    assert alone["systems"]["a"] == both["systems"]["a"] and asked == [["a"]]
    # b is tested, a is read; the result is the one all tested at once give, key order included
    together = kept.paired_tests(base, [a, b], refs, keep_dir=keep)
    assert asked == [["a"], ["b"]] and json.dumps(together) == json.dumps(both)
    assert kept.paired_tests(base, [a, b], refs, keep_dir=keep) == both and len(asked) == 2
    # kept by content: a renamed row reuses its result, under its new name
    renamed = kept.paired_tests(base, [("a-seed1", a[1])], refs, keep_dir=keep)
    assert renamed["systems"]["a-seed1"] == both["systems"]["a"] and len(asked) == 2
    # a changed output, baseline, reference or test is tested again
    changed = ("a", a[1][:-1] + ["ein ganz neuer satz"])
    for args in ((base, [changed], refs), (("base", a[1]), [b], refs), (base, [a], refs[:-1] + ["x"]),
                 (base, [a], refs, "randomization")):
        kept.paired_tests(*args, keep_dir=keep)
    assert len(asked) == 6
    assert len(os.listdir(keep)) == 6
    # SACREBLEU_SEED=none draws fresh samples each time: nothing is kept or read
    monkeypatch.setenv("SACREBLEU_SEED", "none")
    kept.paired_tests(base, [a], refs, keep_dir=keep)
    assert len(asked) == 7 and len(os.listdir(keep)) == 6


def test_a_pretrained_teacher_step_runs_nothing_and_is_keyed_by_its_content(tmp_path):
    """``pretrained: DIR`` (a Hugging Face teacher, configs/hf_teacher.yaml): its step runs no
    command; the data is prepared in its pieces (--vocabulary-from); seq-KD from it reads the raw
    training source; training and the cache take the directory as the teacher; and its key, with
    every key made from it, changes when one of its files does (a retrained teacher is another)."""
    from hf_models import marian_teacher

    from fairseq_distill.errors import DistillError
    from bench.runner import records
    from bench.runner.plan import Plan
    from bench.runner.results import recipe_markdown
    from bench.runner.schema import load_checked

    teacher = marian_teacher(str(tmp_path / "marian"))
    with open(os.path.join(teacher, "teacher.json"), "w") as f:
        json.dump({"parameters": 12345, "test_bleu": 30.5, "test_chrf": 55.25, "test": "test, beam 4",
                   "train_seconds": 600.0, "best_epoch": 2, "epochs": [{}, {}, {}]}, f)
    config = tiny_recipe(tmp_path, "hf", {"student": TINY}, [
        {"name": "hf", "pretrained": teacher},
        {"name": "seqkd", "seqkd": {"teacher": "hf", "beam": 2}},
        {"name": "cache", "cache": {"teacher": "hf", "data": "seqkd", "top-k": 4}},
        {"name": "student", "model": "student", "data": "seqkd", "teacher": "hf", "criterion": "word_kd"}])
    cfg = yaml.safe_load(open(config))
    cfg["data"]["vocabulary_from"] = teacher
    config.write_text(yaml.safe_dump(cfg))
    plan = Plan(load_checked(str(config)), str(config), str(tmp_path / "work"))
    assert plan.commands(plan.by_name["hf"]) == []
    prepare = plan.prepare_command()
    assert prepare[prepare.index("--vocabulary-from") + 1] == teacher and "--bpe" not in prepare
    seqkd = plan.commands(plan.by_name["seqkd"])
    assert len(seqkd) == 1 and seqkd[0][:3] == ["fsd-seqkd", "--teacher", teacher]
    assert seqkd[0][seqkd[0].index("--raw-train-source") + 1] == os.path.join(plan.data_dir, "raw", "train.de")
    cache = plan.commands(plan.by_name["cache"])[0]
    assert cache[cache.index("--teacher") + 1] == teacher
    train = plan.commands(plan.by_name["student"])[0]
    assert train[train.index("--teacher-path") + 1] == teacher

    record = records.pretrained_record(plan, plan.by_name["hf"])
    assert record["kind"] == "pretrained" and record["checkpoint"] == teacher and record["epochs"] == 3
    assert record["test_bleu"] == 30.5 and len(record["sha256"]) == 64
    assert records.run_fingerprint(record) == record["sha256"][:12]
    table = recipe_markdown({"rows": [], "pretrained": [{**record, "name": "hf"}]})
    assert f"| hf | {teacher} | 0.01M | 3 (2) | 10.0 min | 30.50, 55.25 (test, beam 4) | {record['sha256']} |" in table

    weights = os.path.join(teacher, "model.safetensors")
    with open(weights, "ab") as f:
        f.write(b"\0")
    again = Plan(load_checked(str(config)), str(config), str(tmp_path / "work"))
    assert all(again.keys[name] != plan.keys[name] for name in plan.keys)
    assert again.data_key != plan.data_key

    cfg["steps"][0]["model"] = "student"
    config.write_text(yaml.safe_dump(cfg))
    with pytest.raises(DistillError, match="step 'hf': a pretrained step names a model directory and nothing "
                                           "else; it also has model"):
        load_checked(str(config))
    cfg["steps"][0] = {"name": "hf", "pretrained": str(tmp_path / "missing")}
    config.write_text(yaml.safe_dump(cfg))
    with pytest.raises(DistillError, match="the pretrained model .*missing is not a directory here"):
        Plan(load_checked(str(config)), str(config), str(tmp_path / "work"))
