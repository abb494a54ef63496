"""The recipe runner behind the demo and the benchmarks: results, table, cache."""
import json
import os
import re

import yaml

from conftest import python_module, run, write_slice

TINY = {"encoder-layers": 1, "decoder-layers": 1, "encoder-embed-dim": 16, "decoder-embed-dim": 16,
        "encoder-ffn-embed-dim": 32, "decoder-ffn-embed-dim": 32, "encoder-attention-heads": 2,
        "decoder-attention-heads": 2, "arch": "transformer"}


def test_recipe_runs_caches_and_reports(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    write_slice(raw, "train", "train", 300)
    write_slice(raw, "valid", "val", 20)
    write_slice(raw, "test", "test_2016_flickr", 20)
    recipe = {
        "name": "tiny",
        "seed": 1,
        "data": {"source": "de", "target": "en", "train": str(raw / "train"), "valid": str(raw / "valid"),
                 "test": [str(raw / "test")], "vocab_size": 200},
        "train": {"share-all-embeddings": True, "optimizer": "adam", "lr": 0.003, "max-tokens": 1500,
                  "label-smoothing": 0.1, "max-update": 6, "num-workers": 0},
        "models": {"teacher": TINY, "student": TINY},
        "eval": {"beam": 1, "batch-size": 64},
        "steps": [
            {"name": "teacher", "model": "teacher"},
            {"name": "seqkd-data", "seqkd": {"teacher": "teacher", "beam": 1, "max-len-b": 6,
                                             "on-missing": "reference"}},
            {"name": "student-seqkd-wordkd", "model": "student", "data": "seqkd-data",
             "teacher": "teacher", "criterion": "word_kd", "criterion-args": {"kd-weight": 0.5}},
        ],
    }
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(recipe))
    cmd = python_module("fairseq_distill.recipe", str(config), "--workdir", str(tmp_path / "work"),
                        "--results", str(tmp_path / "results"))
    out = run(cmd).stdout
    assert "kd_loss" in out  # fairseq's progress output is shown

    results = json.load(open(tmp_path / "results" / "tiny.json"))
    rows = {r["name"]: r for r in results["rows"]}
    assert set(rows) == {"teacher", "student-seqkd-wordkd"}
    student = rows["student-seqkd-wordkd"]
    assert student["updates"] == 6 and student["teacher"] == "teacher" and student["data"] == "seqkd-data"
    assert student["parameters"] > 0 and 0 <= student["bleu"] <= 100 and student["train_seconds"] > 0
    assert results["seqkd"][0]["sentences"] == 300
    table = open(tmp_path / "results" / "tiny.md").read()
    assert re.search(r"\| student-seqkd-wordkd \| 1\+1, 16, 32 \| 0\.\d\dM \| word_kd \(kd-weight=0.5\) \| "
                     r"seqkd-data \| 1 \| 6 \|", table), table

    # a second run reuses every finished step
    again = run(cmd).stdout
    assert again.count(": cached (") == 3
    assert "fairseq_cli.train" not in again
    # the decoding checkpoints of finished runs exist and are clean
    assert os.path.isfile(student["checkpoint"])
