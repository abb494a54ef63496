"""What a recipe's work dir records and when its scripts redo, keep or refuse a stage: another
recipe's work dir, a --smoke run's, a row whose settings changed, a row that never finished.
The scripts run for real; the tools they call are stubs (tests/recipe_stubs.py)."""
import json
import os
import subprocess
import sys

import pytest

from helpers import REPO
from recipe_stubs import install

pytestmark = pytest.mark.slow  # the recipes' bash scripts

ROWS = {
    "no-kd-2": "no-kd-2\t2\toriginal\tlabel_smoothed_cross_entropy\t-\t4\t35.56",
    "word-kd-3": "word-kd-3\t3\toriginal\tword_kd\t-\t4\t37.00",
    "a2d-3": "a2d-3\t3\toriginal\ta2d\t-\t4\t37.17",
}


@pytest.fixture
def tools(tmp_path):
    bin_dir = install(str(tmp_path / "stubs"))
    log = tmp_path / "calls.jsonl"
    env = dict(os.environ, STUB_LOG=str(log),
               PATH=bin_dir + os.pathsep + os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])

    def bash(recipe, script, *args, expect=0, **extra_env):
        log.write_text("")
        proc = subprocess.run(["bash", os.path.join(REPO, "recipes", recipe, script), *args], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, env=dict(env, **extra_env), cwd=REPO)
        assert proc.returncode == expect, proc.stdout[-3000:]
        return proc.stdout, [json.loads(line) for line in log.read_text().splitlines()]
    return bash


def rows_file(tmp_path, *lines):
    path = tmp_path / f"rows{len(list(tmp_path.glob('rows*.tsv')))}.tsv"
    path.write_text("".join(line + "\n" for line in lines))
    return str(path)


def snapshot(directory):
    found = {}
    for folder, _, files in os.walk(directory):
        for name in files:
            path = os.path.join(folder, name)
            found[os.path.relpath(path, directory)] = (open(path, "rb").read(), os.stat(path).st_mtime_ns)
    return found


def prepared(tools, tmp_path, recipe="iwslt14_de_en"):
    archive = tmp_path / "archive"
    archive.mkdir(exist_ok=True)
    (archive / "de-en.tgz").write_text("an archive")
    out = tmp_path / "work"
    tools(recipe, "prepare.sh", "--archive", str(archive), "--out", str(out), "--no-checksum")
    return out


def test_another_recipes_work_dir_is_refused_before_anything_is_touched(tools, tmp_path):
    """wmt14_en_de/run.sh --smoke --out W, W holding a finished iwslt14_de_en run, exited 0: it took
    IWSLT's teacher and rows as done, trained on its data and overwrote its results; prepare.sh
    kept IWSLT's text as WMT's and truncated archives.sha256 before failing."""
    out = prepared(tools, tmp_path)
    assert open(out / "workdir.txt").read().splitlines()[1:] == ["recipe iwslt14_de_en"]
    rows = rows_file(tmp_path, ROWS["no-kd-2"])
    tools("iwslt14_de_en", "run.sh", "--out", str(out), "--rows", rows)
    assert (out / "results.md").exists() and (out / "archives.sha256").read_text()
    before = snapshot(out)
    for script, args in (("run.sh", ["--smoke"]), ("run.sh", []), ("prepare.sh", ["--archive", str(tmp_path / "archive")])):
        printed, calls = tools("wmt14_en_de", script, "--out", str(out), *args, expect=1)
        assert f"--out {out} is a work dir of the recipe iwslt14_de_en, not wmt14_en_de" in printed, printed
        assert calls == [] and snapshot(out) == before, script
    # a work dir of an earlier version, without the record: its text says which corpus it holds
    os.remove(out / "workdir.txt")
    printed, _ = tools("wmt16_en_de", "run.sh", "--out", str(out), expect=1)
    assert "is a work dir of the recipe iwslt14_de_en, not wmt16_en_de" in printed


def test_a_smoke_runs_work_dir_and_a_full_runs_are_not_mixed(tools, tmp_path):
    """A full run into a --smoke run's --out took the toy teacher (d = 32, 6 updates) as done and
    reported the toy models' scores as the recipe's."""
    out = prepared(tools, tmp_path)
    rows = rows_file(tmp_path, ROWS["no-kd-2"])
    tools("iwslt14_de_en", "run.sh", "--smoke", "--out", str(out), "--rows", rows)
    assert "runs smoke" in open(out / "workdir.txt").read()
    before = snapshot(out)
    printed, calls = tools("iwslt14_de_en", "run.sh", "--out", str(out), "--rows", rows, expect=1)
    assert f"--out {out} holds a --smoke run's models and results" in printed and "runs" in printed
    assert calls == [] and snapshot(out) == before
    # once they are removed, the prepared data serve the full run
    for name in ("runs", "cache", "seqkd", "eval", "results.md", "results.json"):
        subprocess.run(["rm", "-r", str(out / name)], check=True)
    _, calls = tools("iwslt14_de_en", "run.sh", "--out", str(out), "--rows", rows)
    assert [c[0] for c in calls].count("fairseq-train") == 2 and "runs full" in open(out / "workdir.txt").read()
    printed, calls = tools("iwslt14_de_en", "run.sh", "--smoke", "--out", str(out), "--rows", rows, expect=1)
    assert f"--out {out} holds a full run's models and results" in printed and calls == []


def test_a_row_whose_settings_changed_is_refused_naming_what_changed(tools, tmp_path):
    """A row whose options changed after it finished was kept as done (its .done an empty file):
    the table showed the new options beside the scores of a model trained without them."""
    out = prepared(tools, tmp_path)
    tools("iwslt14_de_en", "run.sh", "--out", str(out), "--rows", rows_file(tmp_path, ROWS["a2d-3"]))
    done = open(out / "runs" / "a2d-3" / ".done").read()
    command = next(line for line in done.splitlines() if line.startswith("command: "))
    assert command.startswith("command: fairseq-train $OUT/data/bin --user-dir $PLUGIN --arch transformer_iwslt_de_en")
    assert "--criterion a2d" in command and "--teacher-path $OUT/runs/teacher/checkpoint_best.pt" in command
    assert "from $OUT/runs/teacher/.done: " in done and "data $OUT/data/bin: " in done
    before = snapshot(out / "runs")

    changed = rows_file(tmp_path, ROWS["a2d-3"].replace("\ta2d\t-\t", "\ta2d\t--a2d-released\t"))
    printed, calls = tools("iwslt14_de_en", "run.sh", "--out", str(out), "--rows", changed, "--stage", "students",
                           expect=1)
    assert "run.sh: [students] a2d-3 finished with other settings than this run's" in printed
    assert "now: --a2d-released" in printed and f"delete {out}/runs/a2d-3 to train it again" in printed
    assert calls == [] and snapshot(out / "runs") == before
    # the same settings on another number of GPUs: the device flags are not compared
    printed, calls = tools("iwslt14_de_en", "run.sh", "--out", str(out), "--rows", rows_file(tmp_path, ROWS["a2d-3"]),
                           "--stage", "students", "--gpus", "2")
    assert "[students] a2d-3 done" in printed and calls == []
    # the data binarized again (another vocabulary): every stage made from them is refused
    tools("iwslt14_de_en", "prepare.sh", "--archive", str(tmp_path / "archive"), "--out", str(out),
          "--no-checksum", "--vocab-size", "8000")
    printed, calls = tools("iwslt14_de_en", "run.sh", "--out", str(out), "--rows", rows_file(tmp_path, ROWS["a2d-3"]),
                           expect=1)
    assert "[teacher] finished with other settings" in printed and f"data $OUT/data/bin" in printed and calls == []


def test_an_interrupted_row_is_resumed_only_with_its_settings(tools, tmp_path):
    out = prepared(tools, tmp_path)
    rows = rows_file(tmp_path, ROWS["no-kd-2"])
    tools("iwslt14_de_en", "run.sh", "--out", str(out), "--rows", rows, expect=1, STUB_FAIL="no-kd-2")
    assert not (out / "runs" / "no-kd-2" / ".done").exists()
    changed = rows_file(tmp_path, ROWS["no-kd-2"].replace("\t-\t4\t", "\t--dropout 0.1\t4\t"))
    printed, calls = tools("iwslt14_de_en", "run.sh", "--out", str(out), "--rows", changed, "--stage", "students",
                           expect=1)
    assert "[students] no-kd-2 began with other settings than this run's" in printed and calls == []
    _, calls = tools("iwslt14_de_en", "run.sh", "--out", str(out), "--rows", rows, "--stage", "students")
    assert [c[0] for c in calls] == ["fairseq-train"]  # resumed with its own settings
    assert (out / "runs" / "no-kd-2" / ".done").exists()


def test_evaluate_and_table_take_finished_rows_only_and_name_the_others(tools, tmp_path):
    """A row killed during training (a checkpoint, no .done) was evaluated by --stage evaluate and
    counted by --stage table ("3 of 3 rows measured")."""
    out = prepared(tools, tmp_path)
    rows = rows_file(tmp_path, ROWS["no-kd-2"], ROWS["a2d-3"])
    tools("iwslt14_de_en", "run.sh", "--out", str(out), "--rows", rows, expect=1, STUB_FAIL="a2d-3")
    assert (out / "runs" / "a2d-3" / "checkpoint_best.pt").exists()
    (out / "eval").mkdir()
    (out / "eval" / "a2d-3.scores.json").write_text(json.dumps({"paper_bleu": 9.0}))  # an earlier evaluation
    printed, calls = tools("iwslt14_de_en", "run.sh", "--out", str(out), "--rows", rows, "--stage", "evaluate")
    evaluated = [c[1] for c in calls if c[0] == "fsd-evaluate"]
    assert evaluated == [f"{out}/runs/teacher/checkpoint_best.pt", f"{out}/runs/no-kd-2/checkpoint_best.pt"]
    assert "[evaluate] not finished, not evaluated: a2d-3" in printed
    printed, _ = tools("iwslt14_de_en", "run.sh", "--out", str(out), "--rows", rows, "--stage", "table")
    assert "[table] 2 of 3 rows measured; not finished: a2d-3" in printed
    table = json.load(open(out / "results.json"))
    assert table["unfinished"] == ["a2d-3"] and {r["name"]: bool(r["measured"]) for r in table["rows"]} == {
        "teacher": True, "no-kd-2": True, "a2d-3": False}
    assert "Not finished (not trained to the end): a2d-3." in open(out / "results.md").read()


def test_gpkd_rows_resume_from_their_own_checkpoint_and_record_what_they_started_from(tools, tmp_path):
    """wmt16_en_de's rows start from another model (--restore-file, given on the first launch only):
    the record holds those flags on a resume too, so a resumed row is not taken for a changed one."""
    lines = [line.rstrip("\n") for line in open(os.path.join(REPO, "recipes", "wmt16_en_de", "rows.tsv"))
             if line.startswith(("teacher-skip\t", "gpkd-6-6\t"))]
    rows = rows_file(tmp_path, *lines)
    out = prepared(tools, tmp_path, "wmt16_en_de")
    tools("wmt16_en_de", "run.sh", "--out", str(out), "--rows", rows, expect=1, STUB_FAIL="gpkd-6-6")
    assert (out / "runs" / "gpkd-6-6" / "init.pt.done").exists() and not (out / "runs" / "gpkd-6-6" / ".done").exists()
    printed, calls = tools("wmt16_en_de", "run.sh", "--out", str(out), "--rows", rows)
    trained = [c for c in calls if c[0] == "fairseq-train"]
    assert len(trained) == 1 and "--restore-file" not in trained[0]  # goes on from its own checkpoint
    assert "[extract] gpkd-6-6 done" in printed and "[skip] teacher-skip done" in printed
    record = open(out / "runs" / "gpkd-6-6" / ".done").read()
    assert "--restore-file $OUT/runs/gpkd-6-6/init.pt --reset-optimizer" in record
    assert "from $OUT/runs/gpkd-6-6/init.pt.done: " in record and "from $OUT/seqkd-teacher/.done: " in record
    printed, calls = tools("wmt16_en_de", "run.sh", "--out", str(out), "--rows", rows, "--stage", "students")
    assert "[students] gpkd-6-6 done" in printed and calls == []
