"""What a recipe runs, worked out without running anything: each step's cache key, its
directory, where it leaves its files, and its command lines.

A ``pretrained`` step names a model made elsewhere (a Hugging Face model directory, relative to
the repository): it runs nothing, and its key holds the SHA-256 of the directory's files, so a
retrained teacher is another step. ``data: {vocabulary_from: DIR}`` prepares the corpus in that
teacher's pieces (``fsd-prepare-corpus --vocabulary-from``).

A step's directory is named after a hash of everything that determines its result (its
own settings and those of the steps it depends on), so a finished step is recognised and
an interrupted one resumes in the same place. The command lines are argv lists of the
installed tools (``fsd-prepare-corpus``, ``fsd-extract-student``, ``fairseq-train``,
``fsd-export-student``, ``fsd-evaluate``, ``fsd-seqkd``, ``fsd-cache-teacher``); ``--print-commands`` prints them and
the runner executes exactly them.
"""
import hashlib
import json
import os
from typing import Dict, List, Optional

import torch

from fairseq_distill.errors import DistillError
from fairseq_distill.text.files import file_sha256

from .config import dependencies, evaluated_checkpoint, evaluation_settings, recipe_name

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGE_DIR = os.path.join(REPO, "fairseq_distill")
CORPORA = {"multi30k": {"src": "de", "tgt": "en", "dir": os.path.join(REPO, "data", "multi30k"),
                        "train": "train", "valid": "val", "test": ["test_2016_flickr"]}}


def flags(options: Dict) -> List[str]:
    out = []
    for key, value in options.items():
        if value is False or value is None:
            continue
        out.append(f"--{key}")
        if value is not True:
            out.append(str(value))
    return out


def digest(obj) -> str:
    return hashlib.sha1(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:10]


def extraction_options(spec: dict, seed: int) -> dict:
    """``init: {from: STEP, keep: top, encoder-keep: ..., decoder-group-size: ...}`` as
    keyword arguments of :func:`fairseq_distill.depth.extraction.extract_student`."""
    known = {"keep", "encoder-keep", "decoder-keep", "encoder-group-size", "decoder-group-size"}
    unknown = set(spec) - known
    if unknown:
        raise DistillError(f"init: unknown option(s) {sorted(unknown)}; known: from, {', '.join(sorted(known))}")
    keep = str(spec.get("keep", "top"))
    return {"encoder_keep": str(spec.get("encoder-keep", keep)), "decoder_keep": str(spec.get("decoder-keep", keep)),
            "encoder_group_size": spec.get("encoder-group-size"),
            "decoder_group_size": spec.get("decoder-group-size"), "seed": seed}


class Plan:
    """A recipe's steps as keys, directories and command lines under ``workdir``."""

    def __init__(self, cfg: dict, path: str, workdir: str):
        self.cfg = cfg
        self.path = path
        self.name = recipe_name(cfg, path)
        self.workdir = os.path.abspath(workdir)
        self.steps = cfg["steps"]
        self.by_name = {s["name"]: s for s in self.steps}
        self.evaluated_checkpoint = evaluated_checkpoint(cfg, path)
        self.model_digests: Dict[str, str] = {}  # a pretrained model's directory -> its SHA-256
        data = cfg["data"]
        self.data_key = digest({**data, "vocabulary_sha256": self.model_digest(data["vocabulary_from"])}
                               if data.get("vocabulary_from") else data)
        self.data_dir = os.path.join(self.workdir, "data", f"{cfg['data'].get('corpus', 'corpus')}-{self.data_key}")
        self.data_bin = os.path.join(self.data_dir, "bin")
        self.keys: Dict[str, str] = {}
        for step in self.steps:  # in order: a step's key includes those of its dependencies
            self.keys[step["name"]] = self.step_key(step)

    # -- keys and places ----------------------------------------------------------------

    def model_path(self, given: str) -> str:
        """A pretrained model directory as a recipe names it (relative to the repository), checked."""
        path = given if os.path.isabs(given) else os.path.join(REPO, given)
        if not os.path.isdir(path):
            raise DistillError(f"{self.path}: the pretrained model {given} is not a directory here; give a "
                               f"Hugging Face model directory (bench/hf_teacher.py makes one)")
        return path

    def model_digest(self, given: str) -> str:
        path = self.model_path(given)
        if path not in self.model_digests:
            self.model_digests[path] = file_sha256(path)
        return self.model_digests[path]

    def step_key(self, step) -> str:
        deps = [self.keys[d] for d in dependencies(step)]
        model = self.cfg.get("models", {}).get(step.get("model"), {})
        # which checkpoint is evaluated does not change the run: a finished run is re-evaluated
        # when it changes, not retrained
        evaluation = {k: v for k, v in self.cfg.get("eval", {}).items() if k != "checkpoint"}
        parts = [self.data_key, self.cfg.get("seed", 1), self.cfg.get("train", {}), evaluation, model, step, deps]
        if "pretrained" in step:  # the model's content, wherever it lies
            parts.append(self.model_digest(step["pretrained"]))
        return digest(parts)

    def step_dir(self, step) -> str:
        return os.path.join(self.workdir, "runs", f"{step['name']}-{self.keys[step['name']]}")

    def planned_record(self, step) -> dict:
        """Where a step leaves what later steps use, known before it runs."""
        stepdir = self.step_dir(step)
        if "pretrained" in step:
            return {"kind": "pretrained", "checkpoint": self.model_path(step["pretrained"])}
        if "seqkd" in step:
            return {"kind": "seqkd", "data_bin": os.path.join(stepdir, "bin")}
        if "cache" in step:
            return {"kind": "cache", "cache_dir": os.path.join(stepdir, "cache")}
        return {"kind": "train", "checkpoint": os.path.join(stepdir, "model.pt"),
                "training_checkpoint": os.path.join(stepdir, "checkpoints", "checkpoint_last.pt")}

    def output_of(self, name: str, what: str) -> str:
        return self.planned_record(self.by_name[name])[what]

    def evaluated_checkpoint_path(self, step) -> str:
        return os.path.join(self.step_dir(step), "checkpoints", f"checkpoint_{self.evaluated_checkpoint}.pt")

    def evaluation_json(self, step) -> str:
        """Where ``fsd-evaluate`` leaves its record: next to the checkpoint it scores."""
        return os.path.splitext(self.planned_record(step)["checkpoint"])[0] + ".test.eval.json"

    def data_of(self, step) -> str:
        return self.output_of(step["data"], "data_bin") if step.get("data") else self.data_bin

    def is_first_launch(self, step) -> bool:
        return not os.path.isfile(self.planned_record(step)["training_checkpoint"])

    def start_checkpoint(self, step) -> Optional[str]:
        """The checkpoint a run starts from, if it does not start from scratch."""
        if step.get("init"):
            return os.path.join(self.step_dir(step), "init.pt")  # made by the extraction command
        parent = step.get("finetune") or step.get("continue")
        return self.output_of(parent, "training_checkpoint") if parent else None

    # -- steps: which, in what order -----------------------------------------------------

    def selected_steps(self, only=None) -> List[dict]:
        """The steps ``only`` asks for (all if None) and those they depend on, in recipe order."""
        selected = {s["name"] for s in self.steps if not only or s["name"] in only}
        for step in reversed(self.steps):
            if step["name"] in selected:
                selected.update(dependencies(step))
        return [s for s in self.steps if s["name"] in selected]

    # -- command lines ------------------------------------------------------------------

    def data_source(self):
        """(source, target, train, valid, tests) prefixes of the recipe's raw corpus:
        ``data: {corpus: multi30k, ...}`` or, for any corpus of raw aligned text,
        ``data: {source: de, target: en, train: PREFIX, valid: PREFIX, test: [PREFIX, ...]}``."""
        data = self.cfg["data"]
        if "corpus" in data:
            corpus = CORPORA.get(data["corpus"])
            if corpus is None:
                raise DistillError(f"unknown corpus '{data['corpus']}'; known: {sorted(CORPORA)}, "
                                   f"or give source/target/train/valid/test prefixes")
            j = lambda name: os.path.join(corpus["dir"], name)  # noqa: E731
            return corpus["src"], corpus["tgt"], j(corpus["train"]), j(corpus["valid"]), [j(t) for t in corpus["test"]]
        missing = [k for k in ("source", "target", "train", "valid", "test") if k not in data]
        if missing:
            raise DistillError(f"{self.path}: data needs {missing} (or corpus: multi30k)")
        tests = data["test"] if isinstance(data["test"], list) else [data["test"]]
        return data["source"], data["target"], data["train"], data["valid"], tests

    def prepare_command(self) -> List[str]:
        src, tgt, train, valid, tests = self.data_source()
        data = self.cfg["data"]
        segmentation = (["--vocabulary-from", self.model_path(data["vocabulary_from"])] if data.get("vocabulary_from")
                        else ["--bpe", data.get("bpe", "sentencepiece"), "--vocab-size", str(data.get("vocab_size", 8000))])
        return ["fsd-prepare-corpus", "-s", src, "-t", tgt, "--train-prefix", train, "--valid-prefix", valid,
                "--test-prefix", *tests, "--out", self.data_dir, *segmentation]

    def raw_train_source(self) -> str:
        """The training source as fsd-prepare-corpus kept it (cleaned, before segmentation)."""
        return os.path.join(self.data_dir, "raw", f"train.{self.data_source()[0]}")

    def train_options(self, step, save_dir=None) -> dict:
        """The fairseq-train flags of a training step (recipe defaults, model, step, criterion)."""
        model = dict(self.cfg.get("models", {})[step["model"]])
        options = {**self.cfg.get("train", {}), **model, **step.get("train", {})}
        if step.get("teacher"):
            options["task"] = "translation_distill"
            options["teacher-path"] = self.output_of(step["teacher"], "checkpoint")
        if step.get("teacher-cache"):  # word-level KD from a cache step's teacher outputs
            options["task"] = "translation_distill"
            options["teacher-cache"] = self.output_of(step["teacher-cache"], "cache_dir")
        options["criterion"] = step.get("criterion", options.get("criterion", "label_smoothed_cross_entropy"))
        options.update(step.get("criterion-args", {}))
        options.update({"seed": step.get("seed", self.cfg.get("seed", 1)),
                        "save-dir": save_dir or os.path.join(self.step_dir(step), "checkpoints"),
                        "user-dir": PACKAGE_DIR, "no-epoch-checkpoints": True,
                        "log-format": options.get("log-format", "simple")})
        if not torch.cuda.is_available():
            options["cpu"] = True
        return options

    def starting_point(self, step) -> dict:
        """fairseq-train flags that start a run from another step's model (on its first launch
        only: later launches resume from the run's own checkpoint_last.pt)."""
        start = self.start_checkpoint(step)
        if step.get("init"):
            return {"restore-file": start, "reset-optimizer": True,
                    "reset-lr-scheduler": True, "reset-meters": True, "reset-dataloader": True}
        if step.get("finetune"):
            return {"finetune-from-model": start}
        if step.get("continue"):
            # weights, optimizer and learning-rate schedule go on; epochs count afresh, and the
            # best checkpoint is chosen among this stage's
            return {"restore-file": start, "reset-dataloader": True, "reset-meters": True}
        return {}

    def extraction_command(self, step) -> List[str]:
        """fsd-extract-student for ``init: {from: STEP, keep: ...}``."""
        spec = dict(step["init"])
        source = self.output_of(spec.pop("from"), "checkpoint")
        options = extraction_options(spec, self.cfg.get("seed", 1))
        return ["fsd-extract-student", source, os.path.join(self.step_dir(step), "init.pt"),
                *flags({k.replace("_", "-"): v for k, v in options.items()})]

    def train_command(self, step, first_launch=True) -> List[str]:
        options = self.train_options(step)
        if first_launch:
            options.update(self.starting_point(step))
        return ["fairseq-train", self.data_of(step), *flags(options)]

    def evaluation_commands(self, step) -> List[List[str]]:
        """Export the evaluated checkpoint of a training run and score it on the test set."""
        exported = self.planned_record(step)["checkpoint"]
        ev = evaluation_settings(self.cfg)
        return [["fsd-export-student", self.evaluated_checkpoint_path(step), exported],
                ["fsd-evaluate", exported, self.data_bin, "--subset", "test", "--beam", str(ev["beam"]),
                 "--batch-size", str(ev["batch-size"]), "--lenpen", str(ev["lenpen"])]]

    def seqkd_commands(self, step) -> List[List[str]]:
        """``seqkd: {teacher: STEP, ...}``: fsd-seqkd. With ``external: true`` the teacher is first
        exported with fsd-export-ctranslate2 and then taught as a pretrained model would
        (``--teacher-ctranslate2``: raw text in, text out), as issue 35's measurement needs."""
        opts = dict(step["seqkd"])
        teacher_step = self.by_name[opts.pop("teacher")]
        teacher = self.output_of(teacher_step["name"], "checkpoint")
        stepdir = self.step_dir(step)
        where = ["--data", self.data_bin, "--out", os.path.join(stepdir, "bin"), "--work", os.path.join(stepdir, "work")]
        if "pretrained" in teacher_step:
            # a pretrained teacher reads the raw text through its own tokenizer: the pieces its
            # vocabulary has and the data-bin's dictionary lacks are <unk> in the binarized source
            if opts.pop("external", False):
                raise DistillError(f"{self.path}: step '{step['name']}': external: true exports a trained "
                                   f"teacher first; the pretrained {teacher_step['name']} is taught as it is")
            where += ["--raw-train-source", self.raw_train_source()]
            return [["fsd-seqkd", "--teacher", teacher, *where, *flags(opts)]]
        if not opts.pop("external", False):
            return [["fsd-seqkd", "--teacher", teacher, *where, *flags(opts)]]
        exported = os.path.join(stepdir, "teacher-ctranslate2")
        return [["fsd-export-ctranslate2", teacher, self.data_bin, exported, "--quantization", "float32", "--force"],
                ["fsd-seqkd", "--teacher-ctranslate2", exported, *where, *flags(opts)]]

    def cache_command(self, step) -> List[str]:
        """``cache: {teacher: STEP, top-k: K, [data: SEQKD_STEP], ...}``: fsd-cache-teacher."""
        opts = dict(step["cache"])
        teacher = self.output_of(opts.pop("teacher"), "checkpoint")
        data = self.output_of(opts.pop("data"), "data_bin") if opts.get("data") else self.data_bin
        return ["fsd-cache-teacher", "--teacher", teacher, "--data", data,
                "--out", self.planned_record(step)["cache_dir"], *flags(opts)]

    def commands(self, step, first_launch=True) -> List[List[str]]:
        """What a step runs, as argv lists of the installed tools. A training run resumed
        from its own checkpoint_last.pt (``first_launch=False``) neither extracts its
        starting point again nor restarts from it."""
        if "pretrained" in step:
            return []
        if "seqkd" in step:
            return self.seqkd_commands(step)
        if "cache" in step:
            return [self.cache_command(step)]
        return ([self.extraction_command(step)] if step.get("init") and first_launch else []) + [
            self.train_command(step, first_launch), *self.evaluation_commands(step)]
