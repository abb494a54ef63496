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
