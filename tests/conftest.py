"""Shared fixtures: a tiny slice of the vendored Multi30k, binarized, and a tiny teacher."""
import gzip
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE_DIR = os.path.join(REPO, "fairseq_distill")
MULTI30K = os.path.join(REPO, "data", "multi30k")

# a 1+1-layer, 16-wide Transformer: trains a few updates in seconds on the CPU
TINY_MODEL = [
    "--arch", "transformer", "--share-all-embeddings",
    "--encoder-layers", "1", "--decoder-layers", "1",
    "--encoder-embed-dim", "16", "--decoder-embed-dim", "16",
    "--encoder-ffn-embed-dim", "32", "--decoder-ffn-embed-dim", "32",
    "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
]
TRAIN_FLAGS = [
    "--cpu", "--optimizer", "adam", "--lr", "0.003", "--max-tokens", "1500",
    "--label-smoothing", "0.1", "--no-epoch-checkpoints", "--log-format", "simple",
    "--log-interval", "1", "--seed", "1", "--num-workers", "0",
]


def run(cmd, check=True, env=None, **kwargs):
    """Run a command, returning its combined output; on failure show the output."""
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=env, cwd=kwargs.pop("cwd", REPO), **kwargs)
    if check and proc.returncode != 0:
        raise AssertionError(f"command failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stdout[-4000:]}")
    return proc


def python_module(module, *args):
    return [sys.executable, "-m", module, *args]


def fairseq_train(data, save_dir, *extra):
    return run(python_module("fairseq_cli.train", data, *TRAIN_FLAGS, *TINY_MODEL,
                             "--save-dir", save_dir, *extra))


def tiny_recipe(tmp_path, name, models, steps, n_train=300, **train):
    """Write a benchmark recipe on a slice of Multi30k (vocab 200, a few updates per step)
    to ``tmp_path/<name>.yaml`` and return its path."""
    import yaml

    raw = tmp_path / "raw"
    raw.mkdir(exist_ok=True)
    write_slice(raw, "train", "train", n_train)
    write_slice(raw, "valid", "val", 20)
    write_slice(raw, "test", "test_2016_flickr", 20)
    recipe = {
        "name": name, "seed": 1,
        "data": {"source": "de", "target": "en", "train": str(raw / "train"), "valid": str(raw / "valid"),
                 "test": [str(raw / "test")], "vocab_size": 200},
        "train": {"share-all-embeddings": True, "optimizer": "adam", "lr": 0.003, "max-tokens": 1500,
                  "label-smoothing": 0.1, "max-update": 6, "num-workers": 0, **train},
        "models": models,
        "eval": {"beam": 1, "batch-size": 64},
        "steps": steps,
    }
    config = tmp_path / f"{name}.yaml"
    config.write_text(yaml.safe_dump(recipe))
    return config


def write_slice(out_dir, split, source, n):
    for lang in ("de", "en"):
        with gzip.open(os.path.join(MULTI30K, f"{source}.{lang}.gz"), "rt", encoding="utf-8") as f:
            lines = [next(f) for _ in range(n)]
        with open(os.path.join(out_dir, f"{split}.{lang}"), "w", encoding="utf-8") as f:
            f.writelines(lines)


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory):
    """Binarized data-bin from 400/40/40 Multi30k sentence pairs, sentencepiece vocab 300."""
    root = tmp_path_factory.mktemp("tiny_data")
    raw = root / "raw_in"
    raw.mkdir()
    write_slice(raw, "train", "train", 400)
    write_slice(raw, "valid", "val", 40)
    write_slice(raw, "test", "test_2016_flickr", 40)
    run(python_module("fairseq_distill.cli.prepare_corpus", "-s", "de", "-t", "en",
                      "--train-prefix", str(raw / "train"), "--valid-prefix", str(raw / "valid"),
                      "--test-prefix", str(raw / "test"), "--out", str(root / "prep"),
                      "--vocab-size", "300", "--workers", "1"))
    return str(root / "prep" / "bin")


@pytest.fixture(scope="session")
def tiny_teacher(tiny_data, tmp_path_factory):
    """A tiny stock-fairseq teacher checkpoint trained for 30 updates."""
    save = tmp_path_factory.mktemp("teacher")
    fairseq_train(tiny_data, str(save), "--max-update", "30", "--criterion", "label_smoothed_cross_entropy")
    return str(save / "checkpoint_last.pt")


# a 3+2-layer, 24-wide teacher for layer KD (the tiny student is 1+1, 16 wide)
DEEP_TEACHER = [
    "--arch", "transformer", "--share-all-embeddings",
    "--encoder-layers", "3", "--decoder-layers", "2",
    "--encoder-embed-dim", "24", "--decoder-embed-dim", "24",
    "--encoder-ffn-embed-dim", "48", "--decoder-ffn-embed-dim", "48",
    "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
]


@pytest.fixture(scope="session")
def deep_teacher(tiny_data, tmp_path_factory):
    save = tmp_path_factory.mktemp("deep_teacher")
    run(python_module("fairseq_cli.train", tiny_data, *TRAIN_FLAGS, *DEEP_TEACHER, "--save-dir", str(save),
                      "--max-update", "20", "--criterion", "label_smoothed_cross_entropy"))
    return str(save / "checkpoint_last.pt")
