"""issue 50: bench/gpu_papers.py, the papers' width on a lent GPU, kept from rotting between
lent sessions by running it tiny on the CPU: the same runner, recipe steps and results."""
import json
import os
import sys

import pytest

from helpers import REPO

sys.path.insert(0, REPO)
from bench import gpu_papers  # noqa: E402

pytestmark = pytest.mark.slow  # the runner trains with fairseq-train in subprocesses


def test_the_recipe_holds_every_row_the_issue_asks_for():
    import yaml

    cfg = yaml.safe_load(open(gpu_papers.CONFIG))
    teacher = cfg["models"]["teacher"]
    assert (teacher["arch"], teacher["encoder-layers"], teacher["encoder-embed-dim"],
            teacher["encoder-ffn-embed-dim"], teacher["encoder-attention-heads"]) == ("transformer_iwslt_de_en", 6, 512, 1024, 4)
    assert cfg["train"]["bf16"] is True
    for size in ("2", "3"):
        student = cfg["models"][f"student{size}"]
        assert student["encoder-layers"] == int(size) and student["encoder-embed-dim"] == 512
        names = {s["name"] for s in cfg["steps"]}
        assert {f"{m}-{size}" for m in ("no-kd", "word-kd", "seq-kd", "pkd", "ckd", "alp-kd", "a2d", "a2d-beta1")} <= names


def test_the_cpu_smoke_runs_by_rows_and_resumes_from_its_results(tmp_path):
    out = tmp_path / "results"
    # a first call that gets as far as one row, then a second on a fresh work dir (another machine)
    work = ["--workdir", str(tmp_path / "work")]
    gpu_papers.main(["--smoke", "--out", str(out), "--only", "no-kd-2", *work])
    first = json.load(open(out / "gpu_papers.json"))
    assert [r["name"] for r in first["rows"]] == ["no-kd-2"]
    gpu_papers.main(["--smoke", "--out", str(out), *work])
    rows = {r["name"]: r for r in json.load(open(out / "gpu_papers.json"))["rows"]}
    assert set(rows) == {"teacher", "no-kd-2", "a2d-2"}
    assert rows["no-kd-2"]["run"] == first["rows"][0]["run"]  # taken from the first call's results
    for row in rows.values():
        assert row["bleu"] >= 0 and row["train_seconds"] > 0 and row["tokens_per_second"] > 0 and row["cpu"]
    markdown = (out / "gpu_papers.md").read_text()
    assert "| a2d-2 |" in markdown and "Paired bootstrap test against no-kd-2" in markdown
    assert os.path.isfile(out / "hypotheses" / "gpu_papers" / "a2d-2.txt")
    # small files only: no checkpoint comes back
    assert not [f for _, _, files in os.walk(out) for f in files if f.endswith(".pt")]


# -- a lent GPU's call is not wasted: bad arguments and damaged results are refused first ---------

def refused(argv) -> str:
    with pytest.raises(SystemExit) as raised:
        gpu_papers.main(argv)
    assert raised.value.code not in (0, None), raised.value.code
    return str(raised.value)


def test_an_unknown_step_or_a_missing_reuse_file_is_refused_naming_the_valid_ones(tmp_path, monkeypatch):
    """--only with an unknown step ran nothing and exited 0; --reuse of a missing file was ignored,
    so every row trained again."""
    started = []
    monkeypatch.setattr(gpu_papers, "Runner", lambda *a, **k: started.append(a), raising=False)
    work = ["--workdir", str(tmp_path / "work"), "--out", str(tmp_path / "results")]
    message = refused(["--smoke", *work, "--only", "nokd-2"])
    assert "--only: unknown step 'nokd-2'; valid: teacher, no-kd-2, a2d-2" in message
    message = refused(["--smoke", *work, "--reuse", str(tmp_path / "earlier.json")])
    assert f"--reuse {tmp_path / 'earlier.json'}: no such file" in message
    assert not started and not (tmp_path / "results").exists()


def test_the_full_run_without_a_gpu_stops_unless_told(tmp_path, monkeypatch):
    """It silently started a 30-epoch d = 512 teacher on the CPU."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    started = []
    monkeypatch.setattr(gpu_papers, "run", lambda *a, **k: started.append(a) or {})
    work = ["--workdir", str(tmp_path / "work"), "--out", str(tmp_path / "results")]
    message = refused(work)
    assert "no GPU here" in message and "--allow-cpu" in message and "--smoke" in message and not started
    gpu_papers.main([*work, "--allow-cpu"])
    assert len(started) == 1


def test_a_damaged_results_file_is_refused_in_one_line_naming_it(tmp_path):
    """A truncated gpu_papers.json in --out (the default --reuse) ended in a JSONDecodeError traceback."""
    out = tmp_path / "results"
    out.mkdir()
    (out / "gpu_papers.json").write_text('{"recipe": "gpu_papers", "rows": [{"name": "no-k')
    message = refused(["--smoke", "--out", str(out), "--workdir", str(tmp_path / "work"), "--only", "no-kd-2"])
    assert f"{out / 'gpu_papers.json'} is damaged" in message and "\n" not in message


def test_results_are_replaced_whole_or_not_at_all(tmp_path, monkeypatch):
    """The results were written in place: a call cut off by its time limit while writing lost the
    earlier calls' rows, their only record."""
    import bench.runner.results as results

    out = tmp_path / "results"
    results.write_results(str(out), "gpu_papers", gpu_papers.CONFIG, "last", [], {})
    earlier = {name: (out / name).read_text() for name in ("gpu_papers.json", "gpu_papers.md")}
    real_dump = json.dump

    def cut_off(obj, f, **kwargs):
        f.write('{"recipe": ')
        raise KeyboardInterrupt

    monkeypatch.setattr(results.json, "dump", cut_off)
    with pytest.raises(KeyboardInterrupt):
        results.write_results(str(out), "gpu_papers", gpu_papers.CONFIG, "last", [], {})
    monkeypatch.setattr(results.json, "dump", real_dump)
    assert {name: (out / name).read_text() for name in earlier} == earlier
    assert sorted(os.listdir(out)) == ["gpu_papers.json", "gpu_papers.md", "hypotheses"]
