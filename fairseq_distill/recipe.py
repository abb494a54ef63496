"""Run a recipe: a YAML file of training, seq-KD and evaluation steps, with caching.

Used by the demo and the benchmarks. Each step's directory is named after a hash of
everything that determines its result (its own settings and those of the steps it
depends on), so a finished step is reused and an interrupted one resumes: fairseq-train
continues from ``checkpoint_last.pt`` in the same directory.

A recipe (see ``configs/*.yaml``)::

    name: foundation
    seed: 1
    data: {corpus: multi30k, bpe: sentencepiece, vocab_size: 8000}
    train: {optimizer: adam, lr: 0.001, ...}     # fairseq-train flags shared by all runs
    models: {teacher: {arch: transformer, encoder-layers: 6, ...}, student: {...}}
    eval: {beam: 4, batch-size: 128}           # checkpoint: best (default) or last
    steps:
      - {name: teacher, model: teacher, train: {max-epoch: 20}}
      - {name: seqkd, seqkd: {teacher: teacher, beam: 4}}
      - {name: student-wordkd, model: student, teacher: teacher, criterion: word_kd,
         criterion-args: {kd-weight: 0.5}}
      - {name: student-seqkd, model: student, data: seqkd}
      # GPKD: the student starts from layers extracted from a group-permuted teacher
      - {name: student-gpkd, model: student, data: seqkd, init: {from: teacher, keep: top}}
      # two-stage training: continue another step's run (weights, optimizer, update count)
      - {name: teacher-stage2, model: teacher, continue: teacher, train: {skip-sublayer-rate: 0.4}}
      # start from another step's weights only (fairseq's --finetune-from-model)
      - {name: multidepth, model: flexible, finetune: full, train: {task: translation_multidepth}}

Flags are written without the leading dashes; ``true`` means a bare switch.
"""
import argparse
import glob
import hashlib
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from typing import Dict, List, Optional

import torch
import yaml

from fairseq_distill.checkpoint import export_decoding_checkpoint
from fairseq_distill.errors import DistillError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE_DIR = os.path.join(REPO, "fairseq_distill")
CORPORA = {"multi30k": {"src": "de", "tgt": "en", "dir": os.path.join(REPO, "data", "multi30k"),
                        "train": "train", "valid": "val", "test": ["test_2016_flickr"]}}


def load_recipe(path: str) -> dict:
    """A recipe, with ``extends: other.yaml`` resolved: everything but ``name`` is inherited
    (``models`` are added to the base's, replacing those of the same name), the base's steps run first (finished ones come from the cache); ``base_steps: [...]``
    keeps only the named base steps (e.g. the teacher and the baselines a table compares to)."""
    with open(path) as f:
        cfg = yaml.safe_load(f)
    if "extends" in cfg:
        base_path = os.path.join(os.path.dirname(path), cfg.pop("extends"))
        base = load_recipe(base_path)
        base_steps = base.get("steps", [])
        keep = cfg.pop("base_steps", None)
        if keep is not None:
            known = [s["name"] for s in base_steps]
            unknown = [n for n in keep if n not in known]
            if unknown:
                raise DistillError(f"{path}: base_steps {unknown} are not steps of {base_path}; "
                                   f"its steps are {known}")
            base_steps = [s for s in base_steps if s["name"] in keep]
        steps = base_steps + cfg.pop("steps", [])
        models = {**base.get("models", {}), **cfg.pop("models", {})}  # add to the base's models
        cfg = {**base, **cfg, "models": models, "steps": steps}
    return cfg


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


def log(msg):
    print(f"[recipe] {msg}", flush=True)


class Recipe:
    def __init__(self, path: str, workdir: str, results: str, only=None, reuse=None):
        self.cfg = load_recipe(path)
        self.path = path
        self.name = self.cfg.get("name") or os.path.splitext(os.path.basename(path))[0]
        self.workdir = os.path.abspath(workdir)
        self.results_dir = results
        self.only = only
        self.reuse = list(reuse or ())  # results JSON files whose rows count as done
        self.done = {}  # step name -> record
        self.keys = {}  # step name -> cache key
        names = [s["name"] for s in self.cfg["steps"]]
        if len(set(names)) != len(names):
            raise DistillError(f"{path}: step names must be unique, got {names}")

    # -- data ---------------------------------------------------------------------------

    def prepare_data(self, run=True):
        """``data: {corpus: multi30k, ...}`` or, for any corpus of raw aligned text,
        ``data: {source: de, target: en, train: PREFIX, valid: PREFIX, test: [PREFIX, ...]}``.
        Returns the preparation's fsd-prepare-corpus arguments; ``run=False`` only works out
        where the data goes."""
        data = self.cfg["data"]
        if "corpus" in data:
            corpus = CORPORA.get(data["corpus"])
            if corpus is None:
                raise DistillError(f"unknown corpus '{data['corpus']}'; known: {sorted(CORPORA)}, "
                                   f"or give source/target/train/valid/test prefixes")
            j = lambda name: os.path.join(corpus["dir"], name)  # noqa: E731
            src, tgt = corpus["src"], corpus["tgt"]
            train, valid, tests = j(corpus["train"]), j(corpus["valid"]), [j(t) for t in corpus["test"]]
        else:
            missing = [k for k in ("source", "target", "train", "valid", "test") if k not in data]
            if missing:
                raise DistillError(f"{self.path}: data needs {missing} (or corpus: multi30k)")
            src, tgt, train, valid = data["source"], data["target"], data["train"], data["valid"]
            tests = data["test"] if isinstance(data["test"], list) else [data["test"]]
        key = digest(data)
        out = os.path.join(self.workdir, "data", f"{data.get('corpus', 'corpus')}-{key}")
        argv = ["-s", src, "-t", tgt, "--train-prefix", train, "--valid-prefix", valid,
                "--test-prefix", *tests, "--out", out, "--bpe", data.get("bpe", "sentencepiece"),
                "--vocab-size", str(data.get("vocab_size", 8000))]
        if run:
            from fairseq_distill.cli.prepare_corpus import main as prepare

            prepare(argv)
        self.data_bin = os.path.join(out, "bin")
        self.data_key = key
        return argv

    # -- steps --------------------------------------------------------------------------

    def step_key(self, step) -> str:
        deps = [self.keys[d] for d in dependencies(step)]
        model = self.cfg.get("models", {}).get(step.get("model"), {})
        # which checkpoint is evaluated does not change the run: a finished run is re-evaluated
        # when it changes (see run()), not retrained
        evaluation = {k: v for k, v in self.cfg.get("eval", {}).items() if k != "checkpoint"}
        return digest([self.data_key, self.cfg.get("seed", 1), self.cfg.get("train", {}),
                       evaluation, model, step, deps])

    def evaluated_checkpoint(self) -> str:
        """Which checkpoint of a training run is exported and evaluated (``eval: {checkpoint:}``):
        ``best``, fairseq's checkpoint_best.pt (lowest validation loss; the default), or
        ``last``, the end of the run's budget. Validation loss is measured against the
        references, so it can rise while a model trained on seq-KD targets improves in BLEU;
        a recipe comparing such runs at a fixed budget evaluates ``last``."""
        which = self.cfg.get("eval", {}).get("checkpoint", "best")
        if which not in ("best", "last"):
            raise DistillError(f"{self.path}: eval checkpoint {which!r} is not one of 'best', 'last'")
        return which

    def evaluated_checkpoint_path(self, stepdir) -> str:
        return os.path.join(stepdir, "checkpoints", f"checkpoint_{self.evaluated_checkpoint()}.pt")

    def stale_evaluation(self, record) -> bool:
        """A finished training run whose record evaluated another checkpoint than the recipe asks for."""
        return record["kind"] == "train" and record.get("evaluated_checkpoint", "best") != self.evaluated_checkpoint()

    def step_dir(self, step) -> str:
        return os.path.join(self.workdir, "runs", f"{step['name']}-{self.keys[step['name']]}")

    def load_finished(self):
        """Prepare the data and pick up every finished step, running nothing else."""
        self.prepare_data()
        for step in self.cfg["steps"]:
            self.keys[step["name"]] = self.step_key(step)
            record_path = os.path.join(self.step_dir(step), "record.json")
            if os.path.isfile(record_path):
                with open(record_path) as f:
                    self.done[step["name"]] = with_run(json.load(f), record_path)

    def run(self):
        """Run what is missing. A step is done if its directory holds a record, or if the
        committed results (``reuse``) hold a row with the same key; a done step is rerun only
        when a step that must run needs its files (a teacher checkpoint, seq-KD data)."""
        self.prepare_data()
        steps = self.cfg["steps"]
        for step in steps:
            self.keys[step["name"]] = self.step_key(step)
        selected = {s["name"] for s in self.selected_steps()}
        local = {}
        for step in steps:
            record_path = os.path.join(self.step_dir(step), "record.json")
            if os.path.isfile(record_path):
                with open(record_path) as f:
                    local[step["name"]] = with_run(json.load(f), record_path)
        committed = {n: r for n, r in self.committed_rows().items() if not self.stale_evaluation(r)}
        must_run = {n for n in selected if n not in local and n not in committed}
        for step in reversed(steps):  # a step that runs needs its dependencies' files here
            if step["name"] in must_run:
                must_run.update(d for d in dependencies(step) if d not in local)
        for step in steps:
            name = step["name"]
            if name not in selected:
                # not run now, but a finished step keeps its row in the results
                if name in local or name in committed:
                    self.done[name] = local.get(name) or committed[name]
                continue
            if name in local:
                if self.stale_evaluation(local[name]):
                    local[name] = self.reevaluate(step, local[name])
                self.done[name] = local[name]
                log(f"{name}: cached ({self.step_dir(step)})")
                continue
            if name not in must_run:
                self.done[name] = committed[name]
                log(f"{name}: taken from the committed results (key {self.keys[name]})")
                continue
            stepdir = self.step_dir(step)
            os.makedirs(stepdir, exist_ok=True)
            log(f"{name}: running in {stepdir}")
            record = self.run_seqkd(step, stepdir) if "seqkd" in step else self.run_training(step, stepdir)
            record.update({"name": name, "key": self.keys[name], "run": run_fingerprint(record),
                           # which runs of its dependencies this one was made from
                           "uses": {d: self.done[d].get("run") for d in dependencies(step)}})
            if name in committed:
                # rerun only for its files: say whether it reproduced the committed result
                before, after = committed[name].get("bleu"), record.get("bleu")
                record["reproduces_committed"] = before == after
                record["committed_bleu"] = before
                if before != after:
                    log(f"WARNING: {name} reran with BLEU {after}, the committed results say "
                        f"{before}; rows from the two runs do not share this step")
            with open(os.path.join(stepdir, "record.json"), "w") as f:
                json.dump(record, f, indent=2)
            self.done[name] = record
            self.write_results(quiet=True)  # a long benchmark keeps what it has finished
        return self.write_results()

    def selected_steps(self) -> List[dict]:
        """The steps ``--only`` asks for and those they depend on, in recipe order."""
        steps = self.cfg["steps"]
        selected = {s["name"] for s in steps if not self.only or s["name"] in self.only}
        for step in reversed(steps):
            if step["name"] in selected:
                selected.update(dependencies(step))
        return [s for s in steps if s["name"] in selected]

    def trained_runs(self) -> List[str]:
        """Names of the finished training steps, in recipe order."""
        return [s["name"] for s in self.cfg["steps"] if self.done.get(s["name"], {}).get("kind") == "train"]

    def committed_rows(self) -> Dict[str, dict]:
        """Rows of committed results whose step name and key match a step of this recipe. The
        recipe's own table (``<name>.json``) wins over other tables holding a step of the same
        name and key (e.g. a teacher that recipe retrained, shared with another recipe)."""
        found = {}
        own = f"{self.name}.json"
        for path in sorted(self.reuse, key=lambda p: os.path.basename(p) == own):  # own file last
            if not os.path.isfile(path):
                continue
            with open(path) as f:
                meta = json.load(f)
            for r in meta.get("rows", []) + meta.get("seqkd", []):
                if r.get("key") and r.get("key") == self.keys.get(r.get("name")):
                    found[r["name"]] = r
        return found

    def data_of(self, step) -> str:
        return self.done[step["data"]]["data_bin"] if step.get("data") else self.data_bin

    def seqkd_command(self, step, stepdir) -> List[str]:
        opts = dict(step["seqkd"])
        teacher = self.done[opts.pop("teacher")]["checkpoint"]
        return ["fsd-seqkd", "--teacher", teacher, "--data", self.data_bin, "--out", os.path.join(stepdir, "bin"),
                "--work", os.path.join(stepdir, "work"), *flags(opts)]

    def run_seqkd(self, step, stepdir):
        started = time.time()
        subprocess.run(runnable(self.seqkd_command(step, stepdir)), check=True)
        out = planned_record(step, stepdir)["data_bin"]
        with open(os.path.join(out, "seqkd_summary.json")) as f:
            summary = json.load(f)
        return {"kind": "seqkd", "data_bin": out, "wall_seconds": round(time.time() - started, 1),
                "cpu": cpu_model(), **summary}

    def train_options(self, step, save_dir) -> dict:
        """The fairseq-train flags of a training step (recipe defaults, model, step, criterion)."""
        model = dict(self.cfg.get("models", {})[step["model"]])
        options = {**self.cfg.get("train", {}), **model, **step.get("train", {})}
        if step.get("teacher"):
            options["task"] = "translation_distill"
            options["teacher-path"] = self.done[step["teacher"]]["checkpoint"]
        options["criterion"] = step.get("criterion", options.get("criterion", "label_smoothed_cross_entropy"))
        options.update(step.get("criterion-args", {}))
        options.update({"seed": self.cfg.get("seed", 1), "save-dir": save_dir,
                        "user-dir": PACKAGE_DIR, "no-epoch-checkpoints": True,
                        "log-format": options.get("log-format", "simple")})
        if not torch.cuda.is_available():
            options["cpu"] = True
        return options

    def start_checkpoint(self, step, stepdir) -> Optional[str]:
        """The checkpoint a run starts from, if it does not start from scratch."""
        if step.get("init"):
            return os.path.join(stepdir, "init.pt")  # the student extracted by extraction_command()
        parent = step.get("finetune") or step.get("continue")
        return self.done[parent]["training_checkpoint"] if parent else None

    def starting_point(self, step, stepdir) -> dict:
        """fairseq-train flags that start a run from another step's model (on its first launch
        only: later launches resume from the run's own checkpoint_last.pt)."""
        start = self.start_checkpoint(step, stepdir)
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

    def own_training_seconds(self, step, stepdir, last) -> float:
        """This step's training wall time. fairseq carries its cumulative training time across
        resumes in the checkpoints, but also from the checkpoint a run starts from (even with
        --finetune-from-model), so that run's time is taken off."""
        start = self.start_checkpoint(step, stepdir)
        before = 0.0
        if start:
            state = torch.load(start, map_location="cpu", weights_only=False)
            before = (state.get("extra_state") or {}).get("previous_training_time", 0.0)
        return last["extra_state"]["previous_training_time"] - before

    def extraction_command(self, step, stepdir) -> List[str]:
        """fsd-extract-student for ``init: {from: STEP, keep: ...}``."""
        spec = dict(step["init"])
        source = self.done[spec.pop("from")]["checkpoint"]
        options = extraction_options(spec, self.cfg.get("seed", 1))
        return ["fsd-extract-student", source, os.path.join(stepdir, "init.pt"),
                *flags({k.replace("_", "-"): v for k, v in options.items()})]

    def train_command(self, step, stepdir, first_launch=True, options=None) -> List[str]:
        options = dict(options or self.train_options(step, os.path.join(stepdir, "checkpoints")))
        if first_launch:
            options.update(self.starting_point(step, stepdir))
        return ["fairseq-train", self.data_of(step), *flags(options)]

    def evaluation_command(self, checkpoint) -> List[str]:
        ev = self.cfg.get("eval", {})
        return ["fsd-evaluate", checkpoint, self.data_bin, "--subset", "test", "--beam", str(ev.get("beam", 4)),
                "--batch-size", str(ev.get("batch-size", 128)), "--lenpen", str(ev.get("lenpen", 1.0))]

    def commands(self, step) -> List[List[str]]:
        """What a step runs, as command lines of the installed tools (on a first launch)."""
        stepdir = self.step_dir(step)
        if "seqkd" in step:
            return [self.seqkd_command(step, stepdir)]
        planned = planned_record(step, stepdir)
        return ([self.extraction_command(step, stepdir)] if step.get("init") else []) + [
            self.train_command(step, stepdir),
            ["fsd-export-student", self.evaluated_checkpoint_path(stepdir), planned["checkpoint"]],
            self.evaluation_command(planned["checkpoint"]),
        ]

    def print_commands(self):
        """Print every selected step as shell commands, running nothing: the recipe as a
        script that stock fairseq plus this package's tools would run by hand."""
        print(f"# {self.path}: each step as it runs on its first launch")
        print(shlex.join(["fsd-prepare-corpus", *self.prepare_data(run=False)]))
        for step in self.cfg["steps"]:
            self.keys[step["name"]] = self.step_key(step)
        for step in self.selected_steps():
            self.done[step["name"]] = planned_record(step, self.step_dir(step))
            print(f"\n# step {step['name']}")
            for argv in self.commands(step):
                print(shlex.join(argv))

    def run_training(self, step, stepdir):
        first_launch = not os.path.isfile(os.path.join(stepdir, "checkpoints", "checkpoint_last.pt"))
        if first_launch and step.get("init"):
            from fairseq_distill.cli.extract_student import main as extract

            extract(self.extraction_command(step, stepdir)[1:])
        options = self.train_options(step, os.path.join(stepdir, "checkpoints"))
        cmd = runnable(self.train_command(step, stepdir, first_launch, options))
        with open(os.path.join(stepdir, "train.log"), "a") as logf:
            logf.write(" ".join(cmd) + "\n")
        log(" ".join(cmd))
        # progress goes to the terminal and, copied line by line, to train.log
        # (unbuffered: a pipe would otherwise hold fairseq's progress back for minutes)
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env={**HEAP_MALLOC, **os.environ, "PYTHONUNBUFFERED": "1"})
        with open(os.path.join(stepdir, "train.log"), "a") as logf:
            for line in proc.stdout:
                sys.stdout.write(line)
                sys.stdout.flush()
                logf.write(line)
                logf.flush()
        if proc.wait() != 0:
            raise RuntimeError(f"training step {step['name']} failed; see {stepdir}/train.log")
        return self.evaluate_training(step, stepdir, options)

    def reevaluate(self, step, record) -> dict:
        """A finished run's record for the checkpoint the recipe now evaluates. Re-exported and
        re-evaluated only if that checkpoint holds another model (best and last are often the
        same update); the run is not retrained, and its run fingerprint follows the export."""
        stepdir = self.step_dir(step)
        which = self.evaluated_checkpoint()
        state = torch.load(self.evaluated_checkpoint_path(stepdir), map_location="cpu", weights_only=False)
        if state["optimizer_history"][-1]["num_updates"] == record["updates"]:
            record = {**record, "evaluated_checkpoint": which}
        else:
            log(f"{step['name']}: evaluating checkpoint_{which}.pt (its record evaluated "
                f"checkpoint_{record.get('evaluated_checkpoint', 'best')}.pt)")
            options = self.train_options(step, os.path.join(stepdir, "checkpoints"))
            fresh = self.evaluate_training(step, stepdir, options)
            record = {**record, **fresh, "run": run_fingerprint(fresh)}
        with open(os.path.join(stepdir, "record.json"), "w") as f:
            json.dump(record, f, indent=2)
        return record

    def evaluate_training(self, step, stepdir, options) -> dict:
        """Export the evaluated checkpoint of a finished run, evaluate it, and make its record."""
        planned = planned_record(step, stepdir)
        exported = planned["checkpoint"]
        info = export_decoding_checkpoint(self.evaluated_checkpoint_path(stepdir), exported)
        last = torch.load(planned["training_checkpoint"], map_location="cpu", weights_only=False)
        from fairseq_distill.evaluation import evaluate

        ev = self.cfg.get("eval", {})
        result = evaluate(exported, self.data_bin, "test", beam=ev.get("beam", 4),
                          batch_size=ev.get("batch-size", 128), lenpen=ev.get("lenpen", 1.0))
        log(f"{step['name']}: BLEU {result['bleu']:.2f}, {result['tokens_per_second']:.0f} tokens/s")
        return {
            "kind": "train",
            "checkpoint": exported,
            "training_checkpoint": planned["training_checkpoint"],
            "model": step["model"],
            "init": step.get("init"),
            "continues": step.get("continue"),
            "finetunes": step.get("finetune"),
            "shape": {k: options.get(k) for k in ("arch", "encoder-layers", "decoder-layers",
                                                  "encoder-embed-dim", "encoder-ffn-embed-dim")},
            "criterion": options["criterion"],
            "criterion_args": step.get("criterion-args", {}),
            "teacher": step.get("teacher"),
            "data": step.get("data") or "original",
            "parameters": info["parameters"],
            "evaluated_checkpoint": self.evaluated_checkpoint(),
            "updates": info["num_updates"],
            "epochs": completed_epochs(last["extra_state"]["train_iterator"]),
            "train_seconds": round(self.own_training_seconds(step, stepdir, last), 1),
            "bleu": result["bleu"],
            "bleu_signature": result["bleu_signature"],
            "tokens_per_second": result["tokens_per_second"],
            "sentences_per_second": result["sentences_per_second"],
            "beam": result["beam"],
            "speed_setup": SPEED_SETUP,
            "cpu": cpu_model(),
        }

    # -- results ------------------------------------------------------------------------

    def write_results(self, quiet=False):
        rows = [self.done[s["name"]] for s in self.cfg["steps"]
                if s["name"] in self.done and self.done[s["name"]]["kind"] == "train"]
        table = markdown_table(rows, {n: r.get("run") for n, r in self.done.items()})
        if not quiet:
            print("\n" + table)
        if self.results_dir:
            os.makedirs(self.results_dir, exist_ok=True)
            meta = {"recipe": self.name, "config": os.path.relpath(self.path, REPO),
                    "machine": {"cpu_threads": torch.get_num_threads(),
                                "device": "cuda" if torch.cuda.is_available() else "cpu",
                                "torch": torch.__version__},
                    "rows": rows,
                    "seqkd": [r for r in self.done.values() if r["kind"] == "seqkd"]}
            with open(os.path.join(self.results_dir, f"{self.name}.json"), "w") as f:
                json.dump(meta, f, indent=2)
            with open(os.path.join(self.results_dir, f"{self.name}.md"), "w") as f:
                f.write(f"# {self.name}\n\nConfig: `{meta['config']}`; test set: test (sacreBLEU on "
                        f"detokenised output); beam {rows[0]['beam'] if rows else '-'}; "
                        f"{meta['machine']['device']}, {meta['machine']['cpu_threads']} threads; each run's "
                        f"{CHECKPOINT_MEANING[self.evaluated_checkpoint()]} is evaluated.\n\n")
                f.write(table + "\n")
        return rows


CHECKPOINT_MEANING = {"best": "checkpoint of lowest validation loss (checkpoint_best.pt)",
                      "last": "last checkpoint (checkpoint_last.pt, the end of its budget)"}


def finished_recipe(config: str, workdir=None) -> Recipe:
    """A recipe with its finished steps loaded and nothing run (for analysis and benchmarks);
    ``workdir`` defaults to the runner's, ``work/<config name>``."""
    name = os.path.splitext(os.path.basename(config))[0]
    recipe = Recipe(config, workdir or os.path.join(REPO, "work", name), None)
    recipe.load_finished()
    return recipe


def completed_epochs(iterator_state) -> int:
    """fairseq saves the iterator at the end of epoch n as (epoch n+1, 0 iterations in it)."""
    return iterator_state["epoch"] - (1 if iterator_state.get("iterations_in_epoch", 0) == 0 else 0)


def planned_record(step, stepdir) -> dict:
    """Where a step leaves what later steps use, known before it runs."""
    if "seqkd" in step:
        return {"kind": "seqkd", "data_bin": os.path.join(stepdir, "bin")}
    return {"kind": "train", "checkpoint": os.path.join(stepdir, "model.pt"),
            "training_checkpoint": os.path.join(stepdir, "checkpoints", "checkpoint_last.pt")}


# the installed tools a printed recipe names, and the modules the runner starts them from (the
# runner's own interpreter, so it needs no PATH)
TOOL_MODULES = {"fairseq-train": "fairseq_cli.train", "fsd-seqkd": "fairseq_distill.cli.seqkd"}


def runnable(argv: List[str]) -> List[str]:
    return [sys.executable, "-m", TOOL_MODULES[argv[0]], *argv[1:]]


def dependencies(step) -> List[str]:
    """Names of the steps whose files a step uses."""
    deps = [step.get("teacher"), step.get("data"), step.get("seqkd", {}).get("teacher"),
            (step.get("init") or {}).get("from"), step.get("continue"), step.get("finetune")]
    return [d for d in deps if d]


def extraction_options(spec: dict, seed: int) -> dict:
    """``init: {from: STEP, keep: top, encoder-keep: ..., decoder-group-size: ...}`` as
    keyword arguments of :func:`fairseq_distill.extraction.extract_student`."""
    known = {"keep", "encoder-keep", "decoder-keep", "encoder-group-size", "decoder-group-size"}
    unknown = set(spec) - known
    if unknown:
        raise DistillError(f"init: unknown option(s) {sorted(unknown)}; known: from, {', '.join(sorted(known))}")
    keep = str(spec.get("keep", "top"))
    return {"encoder_keep": str(spec.get("encoder-keep", keep)), "decoder_keep": str(spec.get("decoder-keep", keep)),
            "encoder_group_size": spec.get("encoder-group-size"),
            "decoder_group_size": spec.get("decoder-group-size"), "seed": seed}


# glibc serves every allocation above 32 MiB with a fresh mmap() and unmaps it on free, so
# the B x T x V tensors of each training step (logits, log-probabilities, KD terms) are
# page-faulted anew every step: on the 2-core CPU here a word-KD step spent a third of its
# time in the kernel. Keeping freed memory in the heap (no mmap, no trimming) made the
# step 1.5x faster with identical numbers. Values the user sets win.
HEAP_MALLOC = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(2**40)}


def cpu_model() -> str:
    """The CPU a run was made on. A recipe step repeated with the same seed gives bit-identical
    weights on one machine; on another machine it need not (CPU float kernels may round
    differently), so this says which runs could have reproduced each other."""
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read()
    except OSError:
        return platform.processor() or platform.machine()
    fields = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
    name = " ".join(fields.get("model name\t", platform.machine()).split())
    return name + (" (avx512)" if " avx512f" in fields.get("flags\t\t", "") else "")


# Wall times of rows trained under different set-ups do not compare; the record says which.
SPEED_SETUP = "fused KD term, heap malloc (2026-11-23)"


def run_fingerprint(record) -> str:
    """A short hash of what a finished step produced (its decoding checkpoint, or its seq-KD
    training data): two runs of the same step with different results differ in it."""
    if record["kind"] == "train":
        paths = [record["checkpoint"]]
    else:
        paths = sorted(glob.glob(os.path.join(record["data_bin"], "train.*")))
    h = hashlib.sha1()
    for path in paths:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()[:12]


def with_run(record, record_path) -> dict:
    """A local record, fingerprinted (once, saved back) if written before records carried one."""
    if "run" not in record:
        record["run"] = run_fingerprint(record)
        with open(record_path, "w") as f:
            json.dump(record, f, indent=2)
    return record


def row_dependencies(row) -> List[str]:
    """The steps a results row was made from: :func:`dependencies` of the step it records."""
    data = None if row.get("data") in (None, "original") else row["data"]
    return dependencies({"teacher": row.get("teacher"), "data": data, "init": row.get("init"),
                         "continue": row.get("continues"), "finetune": row.get("finetunes")})


def other_runs_used(row, runs: Dict[str, str]) -> List[str]:
    """The dependencies of ``row`` whose run in this table is not the one it was made from.
    Rows from before runs were fingerprinted count as made from an unfingerprinted run."""
    used = row.get("uses") or {}
    return [d for d in row_dependencies(row) if d in runs and used.get(d) != runs[d]]


def markdown_table(rows, runs: Dict[str, str] = None) -> str:
    """``runs``: step name -> run fingerprint of every finished step (default: the rows'), to
    mark rows made from another run of a step than the one listed (e.g. a retrained teacher)."""
    if runs is None:
        runs = {r["name"]: r.get("run") for r in rows}
    head = ("| run | shape (enc+dec, d, ffn) | params | KD | data | epochs | updates | train time | "
            "BLEU | tokens/s |\n|---|---|---|---|---|---|---|---|---|---|")
    lines, stale = [head], []
    # wall times of rows trained under an older speed set-up are marked, when the table mixes them
    mixed = len({bool(r.get("speed_setup")) for r in rows}) > 1
    for r in rows:
        s = r["shape"]
        kd = r["criterion"] if r.get("teacher") else "none"
        if r.get("criterion_args"):
            kd += " (" + ", ".join(f"{k}={v}" for k, v in r["criterion_args"].items()) + ")"
        if r.get("init"):
            kd += f"; init: layers of {r['init']['from']} (keep {r['init'].get('keep', 'top')})"
        if r.get("continues"):
            kd += f"; continues {r['continues']}"
        if r.get("finetunes"):
            kd += f"; from {r['finetunes']}'s weights"
        mark = " †" if mixed and not r.get("speed_setup") else ""
        other = other_runs_used(r, runs)
        if other:
            stale.append((r["name"], other))
        lines.append(
            f"| {r['name']}{' ‡' if other else ''} | {s['encoder-layers']}+{s['decoder-layers']}, {s['encoder-embed-dim']}, "
            f"{s['encoder-ffn-embed-dim']} | {r['parameters'] / 1e6:.2f}M | {kd} | {r['data']} | "
            f"{r['epochs']} | {r['updates']} | {r['train_seconds'] / 60:.1f} min{mark} | "
            f"{r['bleu']:.2f} | {r['tokens_per_second']:.0f} |"
        )
    if mixed:
        lines.append(f"\n† trained before the runner's speed set-up ({SPEED_SETUP}): its steps ran up to "
                     f"~1.5x slower, so compare its train time only with other † rows; training-step costs "
                     f"measured side by side are in bench/results/*_step_cost.md.")
    if any(r.get("continues") or r.get("finetunes") for r in rows):
        lines.append("\nA row that starts from another step's run (continues / from its weights) states its "
                     "own train time, without that run's; a continued run's update count goes on from "
                     "that run's.")
    if stale:
        retrained = {d for _, deps in stale for d in deps}
        notes = []
        for r in rows:
            if r["name"] in retrained and r.get("committed_bleu") is not None:
                notes.append(f"{r['name']} was retrained with the same recipe and seed and scored "
                             f"{r['bleu']:.2f}; the run the ‡ rows used scored {r['committed_bleu']:.2f}")
        lines.append("\n‡ made from another run of " + ", ".join(sorted(retrained)) + " than the row in "
                     "this table (" + "; ".join(f"{n}: {', '.join(d)}" for n, d in stale) + "). "
                     + ("; ".join(notes) + ". " if notes else "")
                     + "Compare ‡ rows with the others with care: they do not share that step.")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description="Run a fairseq_distill recipe (demo or benchmark).")
    p.add_argument("config", help="YAML recipe, e.g. configs/demo.yaml")
    p.add_argument("--workdir", default=None, help="where data, checkpoints and caches go")
    p.add_argument("--results", default=None, help="write <name>.json and <name>.md here")
    p.add_argument("--only", nargs="*", help="run only these steps (and what they depend on)")
    p.add_argument("--print-commands", action="store_true",
                   help="print each step's commands (fairseq-train, fsd-seqkd, ...) as a shell script "
                        "and exit, running nothing")
    p.add_argument("--reuse", nargs="*", default=(),
                   help="results JSON files (e.g. the committed bench/results/*.json) whose rows "
                        "count as done where step name and key match")
    args = p.parse_args(argv)
    recipe_name = os.path.splitext(os.path.basename(args.config))[0]
    workdir = args.workdir or os.path.join(REPO, "work", recipe_name)
    try:
        recipe = Recipe(args.config, workdir, args.results, args.only, args.reuse)
        recipe.print_commands() if args.print_commands else recipe.run()
    except DistillError as e:
        sys.exit(f"recipe: error: {e}")


if __name__ == "__main__":
    main()
