"""Helpers and constants shared by the tests (a plain module: ``from helpers import ...``;
tests/conftest.py holds only fixtures)."""
import gzip
import os
import re
import subprocess
import sys

import torch

from fairseq_distill.trainer_setup import build_task_and_model, build_training, first_batch  # noqa: F401

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE_DIR = os.path.join(REPO, "fairseq_distill")
MULTI30K = os.path.join(REPO, "data", "multi30k")


def transformer_flags(encoder_layers, decoder_layers, dim, ffn, heads=2):
    """fairseq-train flags of a stock Transformer with shared embeddings."""
    return ["--arch", "transformer", "--share-all-embeddings",
            "--encoder-layers", str(encoder_layers), "--decoder-layers", str(decoder_layers),
            "--encoder-embed-dim", str(dim), "--decoder-embed-dim", str(dim),
            "--encoder-ffn-embed-dim", str(ffn), "--decoder-ffn-embed-dim", str(ffn),
            "--encoder-attention-heads", str(heads), "--decoder-attention-heads", str(heads)]


# a 1+1-layer, 16-wide Transformer: trains a few updates in seconds on the CPU
TINY_MODEL = transformer_flags(1, 1, 16, 32)
# a 3+2-layer, 24-wide teacher for layer KD (the tiny student is 1+1, 16 wide)
DEEP_TEACHER = transformer_flags(3, 2, 24, 48)
TRAIN_FLAGS = [
    "--cpu", "--optimizer", "adam", "--lr", "0.003", "--max-tokens", "1500",
    "--label-smoothing", "0.1", "--no-epoch-checkpoints", "--log-format", "simple",
    "--log-interval", "1", "--seed", "1", "--num-workers", "0",
]
STOCK_ENV_KEYS_TO_DROP = ("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "TORCH_FORCE_WEIGHTS_ONLY_LOAD")


def run(cmd, check=True, env=None, **kwargs):
    """Run a command, returning its combined output; on failure show the output."""
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=env, cwd=kwargs.pop("cwd", REPO), **kwargs)
    if check and proc.returncode != 0:
        raise AssertionError(f"command failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stdout[-4000:]}")
    return proc


def python_module(module, *args):
    return [sys.executable, "-m", module, *args]


def stock_env():
    """The environment of a user running stock fairseq: no weights_only escape hatches."""
    return {k: v for k, v in os.environ.items() if k not in STOCK_ENV_KEYS_TO_DROP}


def fairseq_train(data, save_dir, *extra):
    return run(python_module("fairseq_cli.train", data, *TRAIN_FLAGS, *TINY_MODEL,
                             "--save-dir", save_dir, *extra))


def distill_train(data, teacher, save_dir, criterion, *extra):
    """fairseq-train of the tiny student with the plugin against ``teacher``; its output."""
    return fairseq_train(data, save_dir, "--user-dir", PACKAGE_DIR, "--task", "translation_distill",
                         "--teacher-path", teacher, "--criterion", criterion, *extra).stdout


# -- in-process: fairseq-train's command line, built as fairseq-train builds it ----------------

def train_argv(data, *extra, criterion="word_kd", model=TINY_MODEL):
    return [data, "--user-dir", PACKAGE_DIR, "--criterion", criterion, *TRAIN_FLAGS, *model,
            "--dropout", "0", *extra]


def build(data, *extra, criterion="word_kd", model=TINY_MODEL):
    """(cfg, task, model) of the tiny student, dropout 0; the criterion left unbuilt."""
    return build_task_and_model(train_argv(data, *extra, criterion=criterion, model=model))


def build_trainer(data, *extra, criterion="word_kd"):
    """(cfg, task, model, criterion, trainer) of the tiny student, dropout 0."""
    return build_training(train_argv(data, *extra, criterion=criterion))


# -- data --------------------------------------------------------------------------------------

def write_slice(out_dir, split, source, n):
    """The first ``n`` pairs of the vendored Multi30k ``source`` as ``out_dir/split.{de,en}``."""
    for lang in ("de", "en"):
        with gzip.open(os.path.join(MULTI30K, f"{source}.{lang}.gz"), "rt", encoding="utf-8") as f:
            lines = [next(f) for _ in range(n)]
        with open(os.path.join(out_dir, f"{split}.{lang}"), "w", encoding="utf-8") as f:
            f.writelines(lines)


def write_raw_corpus(raw, train, valid, test):
    """train/valid/test text prefixes under ``raw`` from the first pairs of Multi30k."""
    os.makedirs(raw, exist_ok=True)
    write_slice(raw, "train", "train", train)
    write_slice(raw, "valid", "val", valid)
    write_slice(raw, "test", "test_2016_flickr", test)
    return raw


def prepare_corpus_argv(raw, out, *extra):
    """fsd-prepare-corpus de->en on the prefixes ``write_raw_corpus`` writes."""
    return python_module("fairseq_distill.cli.prepare_corpus", "-s", "de", "-t", "en",
                         "--train-prefix", str(os.path.join(raw, "train")),
                         "--valid-prefix", str(os.path.join(raw, "valid")),
                         "--test-prefix", str(os.path.join(raw, "test")), "--out", str(out), *extra)


def tiny_recipe(tmp_path, name, models, steps, n_train=300, **train):
    """Write a benchmark recipe on a slice of Multi30k (vocab 200, a few updates per step)
    to ``tmp_path/<name>.yaml`` and return its path."""
    import yaml

    raw = write_raw_corpus(tmp_path / "raw", n_train, 20, 20)
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


# -- checks shared by the criterion CLI tests ---------------------------------------------------

def export_drops_criterion_and_decodes_stock(data, checkpoint, exported, distill_only):
    """fsd-export-student drops the criterion's tensors (none of the model's parameter names
    contains ``distill_only``) and stock fairseq-generate, without the plugin, decodes the
    result: the 40 test sentences of ``tiny_data``."""
    msg = run(python_module("fairseq_distill.cli.export_student", checkpoint, exported)).stdout
    assert re.search(r"dropped [1-9]\d* criterion tensors", msg)
    state = torch.load(exported, weights_only=True)
    assert "criterion" not in state and not any(distill_only in k for k in state["model"])
    gen = run(python_module("fairseq_cli.generate", data, "--path", exported, "--cpu", "--beam", "1",
                            "--max-len-b", "5", "--batch-size", "16"), env=stock_env())
    assert "Translated 40 sentences" in gen.stdout


def assert_heatmap_refuses_exported(module, exported, png):
    """A heat-map command on a decoding checkpoint (no criterion state) fails, saying why."""
    proc = run(python_module(module, exported, "--out", png), check=False)
    assert proc.returncode != 0 and "has no criterion state" in proc.stdout


# -- a distillation criterion on the tiny student, in-process -----------------------------------

def distill_loss(data, teacher, criterion, *extra):
    """The tiny student's training loss (train mode) on the first batch, teacher attached:
    (task, model, crit, loss, logs)."""
    cfg, task, model = build(data, "--task", "translation_distill", "--teacher-path", teacher, *extra,
                             criterion=criterion)
    crit = task.build_criterion(cfg.criterion)
    model.train()
    crit.train()
    loss, _, logs = crit(model, first_batch(task))
    return task, model, crit, loss, logs


def assert_weighted_sum(loss, logs, weights, rel=1e-5):
    """``loss`` is the sum of the logged terms ``logs[name]`` times ``weights[name]``."""
    import pytest

    want = sum(weight * logs[name] for name, weight in weights.items())
    assert loss.item() == pytest.approx(want.item(), rel=rel)


def reverse_train(data_bin):
    """Binarize ``data_bin``'s train set again in place with its sentences in reverse order: other
    data of the same size, dictionaries and token count, at the same path."""
    from fairseq.data import Dictionary, data_utils, indexed_dataset

    for name in sorted(os.listdir(data_bin)):
        if not (name.startswith("train.") and name.endswith(".bin")):
            continue
        prefix = os.path.join(data_bin, name[:-4])
        vocab = len(Dictionary.load(os.path.join(data_bin, f"dict.{name.split('.')[2]}.txt")))
        dataset = data_utils.load_indexed_dataset(prefix, None)
        items = [dataset[i].numpy().copy() for i in range(len(dataset))][::-1]
        del dataset
        builder = indexed_dataset.make_builder(prefix + ".new.bin", impl="mmap", vocab_size=vocab)
        for item in items:
            builder.add_item(torch.from_numpy(item))
        builder.finalize(prefix + ".new.idx")
        for ext in ("bin", "idx"):
            os.replace(f"{prefix}.new.{ext}", f"{prefix}.{ext}")


class Interrupted(Exception):
    """the machine stopping mid-way (an exception pytest lets through, unlike KeyboardInterrupt)"""


def stop_binarizing_at(monkeypatch, binarize, stop_at):
    """fairseq_distill.text.binarize's pieces stopped (Interrupted) when one named in the list
    ``stop_at`` (e.g. "15-21") starts; the others run. Returns the names of the pieces started,
    one per side, in order; empty ``stop_at`` (``.clear()``) to let every piece run."""
    real_piece = binarize.binarize_piece
    started = []

    def interrupted(job):
        # a job is one side of a piece: .../train.FIRST-LAST.SRC-TGT.LANG
        piece = os.path.basename(job[-1]).split(".")[1]
        if piece in stop_at:
            raise Interrupted
        started.append(piece)
        return real_piece(job)

    monkeypatch.setattr(binarize, "binarize_piece", interrupted)
    return started
