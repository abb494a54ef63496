"""The benchmark analyses (bench/*.py) on tiny recipes: each runs end to end on finished
runs and writes the figures it promises, so a long benchmark does not fail at its end."""
import json
import os
import sys

import pytest
import yaml

from helpers import REPO, run, tiny_recipe

pytestmark = pytest.mark.slow  # the bench scripts run in their own processes

SMALL = {"arch": "transformer", "encoder-layers": 1, "decoder-layers": 1, "encoder-embed-dim": 16,
         "decoder-embed-dim": 16, "encoder-ffn-embed-dim": 32, "decoder-ffn-embed-dim": 32,
         "encoder-attention-heads": 2, "decoder-attention-heads": 2}
TEACHER = {**SMALL, "encoder-layers": 2, "decoder-layers": 2, "encoder-embed-dim": 24, "decoder-embed-dim": 24}


def bench(script, config, workdir, results, *args):
    return run([sys.executable, os.path.join(REPO, "bench", script), str(config), "--workdir", str(workdir),
                "--results", str(results), *args]).stdout


@pytest.fixture(scope="module")
def kd_recipe(tmp_path_factory):
    root = tmp_path_factory.mktemp("kd_recipe")
    config = tiny_recipe(root, "kd-tiny", {"teacher": TEACHER, "student": SMALL}, [
        {"name": "teacher", "model": "teacher", "train": {"max-update": 20}},
        {"name": "wordkd", "model": "student", "teacher": "teacher", "criterion": "word_kd"},
        {"name": "alp", "model": "student", "teacher": "teacher", "criterion": "alp_kd",
         "criterion-args": {"alp-score": "scaled_dot"}},
        {"name": "a2d", "model": "student", "teacher": "teacher", "criterion": "a2d"},
        {"name": "student", "model": "student"},
        {"name": "cache", "cache": {"teacher": "teacher", "top-k": 4}},
        {"name": "cached", "model": "student", "teacher-cache": "cache", "criterion": "word_kd"},
    ])
    bench("run.py", config, root / "work", root / "results")
    return config, root / "work", root / "results"


def test_step_cost_reports_each_criterion_relative_to_word_kd_and_no_kd(kd_recipe):
    config, work, results = kd_recipe
    bench("step_cost.py", config, work, results, "--steps", "2", "--warmup", "1")
    rows = {r["name"]: r for r in json.load(open(results / "kd-tiny_step_cost.json"))["rows"]}
    assert set(rows) == {"wordkd", "alp", "a2d", "student", "cached"}
    assert rows["wordkd"]["time_relative_to_word_kd"] == 1.0 and rows["student"]["time_relative_to_no_kd"] == 1.0
    for r in rows.values():
        assert r["median_step_seconds"] > 0 and r["target_tokens"] > 0
        for tag, ref in (("word_kd", "wordkd"), ("no_kd", "student")):
            assert r[f"time_relative_to_{tag}"] == pytest.approx(
                r["median_step_seconds"] / rows[ref]["median_step_seconds"], abs=1e-3)
    assert rows["cached"]["teacher_cache"] == "cache"
    table = open(results / "kd-tiny_step_cost.md").read()
    assert "| a2d | a2d |" in table and "| cached | word_kd from cache |" in table
    assert "| student | none (no KD) |" in table

    # made from the same runs with the same options: not measured again, unless forced
    before = open(results / "kd-tiny_step_cost.json").read()
    again = bench("step_cost.py", config, work, results, "--steps", "2", "--warmup", "1")
    assert "[kd-tiny_step_cost.json] current: made from the same runs (wordkd, alp, a2d, student, cached, cache, teacher)" in again
    assert "[step_cost]" not in again and open(results / "kd-tiny_step_cost.json").read() == before

    # --only: the steps named, the one without a teacher as the no-KD reference; a wrong name is named
    only = results.parent / "only"
    bench("step_cost.py", config, work, only, "--steps", "1", "--warmup", "1", "--only", "student", "cached")
    rows = {r["name"]: r for r in json.load(open(only / "kd-tiny_step_cost.json"))["rows"]}
    assert set(rows) == {"student", "cached"} and rows["student"]["time_relative_to_no_kd"] == 1.0
    wrong = run([sys.executable, os.path.join(REPO, "bench", "step_cost.py"), str(config), "--workdir", str(work),
                 "--results", str(only), "--only", "studnet"], check=False)
    assert wrong.returncode != 0 and "--only studnet: not a training step of the recipe" in wrong.stdout
    # the options are part of what the results were made from, so other options measure again
    # (bench.analysis.is_current: test_recipe.py)
    assert json.loads(before)["inputs"]["options"]["steps"] == 2


def test_heatmaps_of_alp_and_a2d_runs(kd_recipe):
    config, work, results = kd_recipe
    out = bench("heatmaps.py", config, work, results)
    assert "[alp] wrote" in out and "[a2d] wrote" in out
    alp = json.load(open(results / "kd-tiny_alp_heatmap.json"))
    (row,) = alp["encoder"]  # one student layer over the teacher's layers 0..2 (0 unused)
    assert row["student_layer"] == 1 and row["weights"][0] == 0.0
    assert sum(row["weights"]) == pytest.approx(1.0, abs=1e-3)
    a2d = json.load(open(results / "kd-tiny_a2d_heatmap.json"))
    assert a2d["encoder_self"]["student"] == [1, 2] and a2d["encoder_self"]["teacher"] == [2, 2]
    assert len(a2d["encoder_self"]["weight"]) == 4 and len(a2d["encoder_self"]["weight"][0]) == 2
    for name in ("alp", "a2d"):
        with open(results / f"kd-tiny_{name}_heatmap.png", "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_ctranslate2_speed_of_the_best_distilled_student(kd_recipe):
    pytest.importorskip("ctranslate2")
    config, work, results = kd_recipe
    bench("ctranslate2_speed.py", config, work, results, "--beam", "1", "--repeats", "2")
    meta = json.load(open(results / "kd-tiny_ctranslate2.json"))
    text = json.dumps(meta)
    assert meta["run"] in {"wordkd", "alp", "a2d"}, text
    backends = [r["backend"] for r in meta["rows"]]
    assert len(backends) == 3, text
    for r in meta["rows"]:  # the fastest of the two rounds
        assert len(r["tokens_per_second_rounds"]) == 2 and r["tokens_per_second"] == max(r["tokens_per_second_rounds"])


FLEX = {**SMALL, "arch": "flexible_transformer", "encoder-layers": 2, "decoder-layers": 2}


def test_depth_grid_and_decode_speed(tmp_path):
    config = tiny_recipe(tmp_path, "depth-tiny", {
        "full": FLEX,
        "layerdrop": {**FLEX, "arch": "transformer", "encoder-normalize-before": True,
                      "decoder-normalize-before": True, "encoder-layerdrop": 0.2, "decoder-layerdrop": 0.2},
        "single": {**FLEX, "encoder-layers": 1, "decoder-layers": 1},
    }, [
        {"name": "full", "model": "full"},
        {"name": "multidepth", "model": "full", "finetune": "full",
         "train": {"task": "translation_multidepth", "sample-encoder-depths": 2, "sample-decoder-depths": 2,
                   "max-update": 3}},
        {"name": "layerdrop", "model": "layerdrop", "finetune": "full", "train": {"max-update": 3}},
        {"name": "single", "model": "single"},
    ])
    recipe = yaml.safe_load(config.read_text())
    recipe["compare"] = {"baseline": "layerdrop"}
    config.write_text(yaml.safe_dump(recipe))
    work, results = tmp_path / "work", tmp_path / "results"
    bench("run.py", config, work, results)

    bench("depth_grid.py", config, work, results, "--beam", "1")
    summary = json.load(open(results / "depth-tiny_grid.json"))
    grid = summary["models"]
    pairs = {(e, d) for e in (1, 2) for d in (1, 2)}  # the divisors of 2 on each side
    for name in ("multidepth", "layerdrop"):
        assert {(r["encoder_depth"], r["decoder_depth"]) for r in grid[name]["rows"]} == pairs
        assert os.path.isfile(results / f"depth-tiny_{name}.png")
    assert [(r["encoder_depth"], r["decoder_depth"]) for r in grid["single"]["rows"]] == [(1, 1)]
    # paired tests where an individually trained model exists (full at 2+2, single at 1+1): the
    # depth-flexible models against it, and the multi-task model against the compare baseline
    tests = {(t["depth"], t["baseline"]): t for t in summary["significance"]}
    assert set(tests) == {("2+2", "full"), ("2+2", "layerdrop"), ("1+1", "single"), ("1+1", "layerdrop")}
    assert set(tests[("1+1", "single")]["systems"]) == {"multidepth", "layerdrop"}
    assert set(tests[("1+1", "layerdrop")]["systems"]) == {"multidepth"}
    cell = {(r["encoder_depth"], r["decoder_depth"]): r for r in grid["multidepth"]["rows"]}[(1, 1)]
    assert tests[("1+1", "single")]["systems"]["multidepth"]["bleu"]["score"] == pytest.approx(cell["bleu"], abs=0.01)
    assert tests[("1+1", "single")]["systems"]["multidepth"]["bleu"]["baseline"] == pytest.approx(
        grid["single"]["rows"][0]["bleu"], abs=0.01)
    assert "### 1+1: against single" in (results / "depth-tiny_grid.md").read_text()
    assert "current: made from the same runs" in bench("depth_grid.py", config, work, results, "--beam", "1")
    # an evaluation interrupted before the summary resumes: models already evaluated are not decoded
    # again (--force, which decodes every model again, is bench.analysis.is_current's: test_recipe.py)
    evaluated = json.load(open(results / "depth-tiny_grid.json"))["models"]
    os.remove(results / "depth-tiny_grid.json")
    out = bench("depth_grid.py", config, work, results, "--beam", "1")
    assert "[depth-tiny_multidepth.json] current" in out and "[depth-tiny_layerdrop.json] current" in out, out
    assert "[depths]" not in out, out
    assert json.load(open(results / "depth-tiny_grid.json"))["models"] == evaluated

    bench("decode_speed.py", config, work, results, "--reference", "full", "--runs", "single",
          "--beams", "1", "--repeats", "1")
    speed = json.load(open(results / "depth-tiny_decode_speed.json"))
    text = json.dumps(speed)
    rows = {r["run"]: r for r in speed["rows"]}
    assert set(rows) == {"full", "single"}, text
    assert rows["full"]["beam1"]["ratio"] == 1.0, text
    assert rows["single"]["beam1"]["tokens_per_second"] > 0 and rows["single"]["shape"].startswith("1+1"), text


def test_report_renders_the_summary_from_the_results_files_only(tmp_path):
    """bench/report.py reads results JSON only: one row per distinct run across recipes, the
    CTranslate2 rows included, and a row without a measured speed listed but not plotted."""
    import shutil

    results = tmp_path / "results"
    shutil.copytree(os.path.join(REPO, "bench", "results"), results)
    # the inputs this test controls: a student two recipes share (same key, same results), a
    # teacher retrained under the same key (other results), and a row without a measured speed
    foundation, layer_kd = (json.load(open(results / f"{n}.json")) for n in ("foundation", "layer_kd"))
    student = {**foundation["rows"][1], "name": "shared-student", "key": "1111111111", "bleu": 12.34,
               "tokens_per_second": 4321.0}
    teacher = {**foundation["rows"][0], "name": "retrained", "key": "2222222222", "bleu": 40.0}
    foundation["rows"] += [student, teacher,
                           {**student, "name": "unmeasured", "key": "0000000000", "tokens_per_second": None}]
    layer_kd["rows"] += [student, {**teacher, "bleu": 41.0}]
    for name, meta in (("foundation", foundation), ("layer_kd", layer_kd)):
        json.dump(meta, open(results / f"{name}.json", "w"))
    out = run([sys.executable, os.path.join(REPO, "bench", "report.py"), "--results", str(results),
               "--out", str(tmp_path / "out")]).stdout
    summary = open(tmp_path / "out" / "summary.md").read()
    s = student["shape"]
    shape = f"{s['encoder-layers']}+{s['decoder-layers']}, {s['encoder-embed-dim']}, {s['encoder-ffn-embed-dim']}"
    params = f"{student['parameters'] / 1e6:.2f}M"
    assert f"| foundation, layer_kd | shared-student | student | fairseq | {shape} | {params} | {student['beam']} | 12.34 | 4321 |" in summary
    assert summary.split("# Each recipe's table")[0].count("| shared-student |") == 1
    assert "| foundation | retrained | teacher |" in summary and "| layer_kd | retrained | teacher |" in summary
    assert "| 40.00 |" in summary and "| 41.00 |" in summary
    assert f"| foundation | unmeasured | student | fairseq | {shape} | {params} | {student['beam']} | 12.34 | not measured (not plotted) |" in summary
    assert "listed in the table but not plotted (1 here)" in summary
    assert "| foundation_ctranslate2 | student-seqkd-wordkd | student | ctranslate2 (int8) |" in summary
    rows = summary.split("# Each recipe's table")[0].count("\n| ") - 1  # less the header
    assert f"({rows - 1} of {rows} rows plotted)" in out
    with open(tmp_path / "out" / "summary.png", "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    # --out, not the results directory
    assert open(results / "summary.md").read() == open(os.path.join(REPO, "bench", "results", "summary.md")).read()


def test_committed_results_tables_are_rendered_from_their_json(tmp_path):
    """Each committed recipe table is the one its JSON renders, and the committed summary is the
    one bench/report.py writes from the committed results (re-run it after new results)."""
    sys.path.insert(0, REPO)
    from bench.report import recipe_results
    from bench.runner.results import recipe_caption, recipe_markdown

    committed = recipe_results(os.path.join(REPO, "bench", "results"))
    assert set(committed) >= {"foundation", "layer_kd", "a2d", "gpkd", "flexible_depth"}
    whole = 0
    for name, meta in committed.items():
        table = recipe_markdown(meta)
        text = open(os.path.join(REPO, "bench", "results", f"{name}.md")).read()
        assert text.endswith(table), name
        checkpoints = {r.get("evaluated_checkpoint") for r in meta["rows"]}
        if len(checkpoints) == 1 and None not in checkpoints:  # rows that record what was evaluated
            assert text == recipe_caption(meta, checkpoints.pop()) + table, name
            whole += 1
    assert whole >= 4
    run([sys.executable, os.path.join(REPO, "bench", "report.py"), "--results",
         os.path.join(REPO, "bench", "results"), "--out", str(tmp_path)])
    assert open(tmp_path / "summary.md").read() == open(os.path.join(REPO, "bench", "results", "summary.md")).read()


def test_summary_plot_has_one_panel_per_recipe_and_labels_its_pareto_front():
    sys.path.insert(0, REPO)
    from bench.report import panels, pareto_front

    def row(run, speed, bleu, recipe="r1", backend="fairseq"):
        return {"run": run, "tokens_per_second": speed, "bleu": bleu, "recipes": [recipe], "backend": backend}

    fast_bad, slow_good, dominated, tie = row("a", 300, 20), row("b", 100, 30), row("c", 90, 25), row("d", 300, 20)
    assert [r["run"] for r in pareto_front([fast_bad, slow_good, dominated])] == ["a", "b"]
    assert [r["run"] for r in pareto_front([fast_bad, tie])] == ["a", "d"]  # equal points both stay
    grouped = panels([row("x", 1, 1, "r2"), fast_bad, row("ct2", 5, 5, backend="ctranslate2 (int8)"),
                      row("unmeasured", None, 3)])
    assert {k: [r["run"] for r in v] for k, v in grouped.items()} == {
        "r1": ["a"], "r2": ["x"], "CTranslate2 exports (ct2)": ["ct2"]}
    assert list(grouped)[-1].startswith("CTranslate2")  # the deployment panel comes last


def test_committed_results_hold_no_machine_paths():
    """issue 49: results named the work dir of the machine that ran them (/work/benchwork/...);
    they are committed and read elsewhere, so paths are relative to the work dir."""
    import glob
    import re

    absolute = re.compile(r"(?<![\w.<>$/-])/(?:tmp|root|work|home|usr|opt|mnt|var|data|scratch)/")
    for path in sorted(glob.glob(os.path.join(REPO, "bench", "results", "**", "*"), recursive=True)):
        if not os.path.isfile(path) or path.endswith((".png", ".txt")):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            for number, line in enumerate(f, 1):
                assert not absolute.search(line), f"{os.path.relpath(path, REPO)} line {number}: {line.strip()[:120]}"


def test_portable_paths():
    from bench.runner.portable import portable

    work = "/scratch/me/work/papers"
    obj = {"checkpoint": f"{work}/runs/t-1/model.pt", "old": "/work/benchwork/papers/runs/s-2/model.pt",
           "data_bin": "/elsewhere/x/data/multi30k-5c/bin", "tool": "/usr/bin/perl", "bleu": 31.0,
           "list": ["/tmp/gc", "relative/path"], "text": "a /tmp/x inside a sentence stays"}
    assert portable(obj, [work]) == {
        "checkpoint": "runs/t-1/model.pt", "old": "runs/s-2/model.pt", "data_bin": "data/multi30k-5c/bin",
        "tool": "<elsewhere>/perl", "bleu": 31.0, "list": ["<elsewhere>/gc", "relative/path"],
        "text": "a /tmp/x inside a sentence stays"}
