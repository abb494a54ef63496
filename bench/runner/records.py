"""A finished step's record: what it made and how, read from its files after it ran.

Records are kept in the step's directory (``record.json``), the runner's cache; the results
tables are written from them. A record also names its run (a fingerprint of what the step
produced) and the runs of the steps it used, so that a table can tell when two of its rows
were made from different runs of one step (e.g. a retrained teacher).
"""
import glob
import hashlib
import json
import os
from typing import Dict, Iterable

import torch

from fairseq_distill.errors import DistillError

from .host import SPEED_SETUP, cpu_model
from .plan import Plan
from .seqkd_quality import target_scores


def completed_epochs(iterator_state) -> int:
    """fairseq saves the iterator at the end of epoch n as (epoch n+1, 0 iterations in it)."""
    return iterator_state["epoch"] - (1 if iterator_state.get("iterations_in_epoch", 0) == 0 else 0)


def own_training_seconds(plan: Plan, step, last) -> float:
    """This step's training wall time. fairseq carries its cumulative training time across
    resumes in the checkpoints, but also from the checkpoint a run starts from (even with
    --finetune-from-model), so that run's time is taken off."""
    start = plan.start_checkpoint(step)
    before = 0.0
    if start:
        state = torch.load(start, map_location="cpu", weights_only=False)
        before = (state.get("extra_state") or {}).get("previous_training_time", 0.0)
    return last["extra_state"]["previous_training_time"] - before


def training_record(plan: Plan, step) -> dict:
    """The record of a training run whose evaluation commands have run."""
    planned = plan.planned_record(step)
    options = plan.train_options(step)
    exported = torch.load(planned["checkpoint"], map_location="cpu", weights_only=False)
    last = torch.load(planned["training_checkpoint"], map_location="cpu", weights_only=False)
    with open(plan.evaluation_json(step)) as f:
        result = json.load(f)
    return {
        "kind": "train",
        "checkpoint": planned["checkpoint"],
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
        "teacher_cache": step.get("teacher-cache"),
        "data": step.get("data") or "original",
        "parameters": result["parameters"],
        "evaluated_checkpoint": plan.evaluated_checkpoint,
        # the evaluated checkpoint's update (best may come before the run's last) and the run's
        "updates": exported["optimizer_history"][-1]["num_updates"],
        "trained_updates": last["optimizer_history"][-1]["num_updates"],
        "epochs": completed_epochs(last["extra_state"]["train_iterator"]),
        "train_seconds": round(own_training_seconds(plan, step, last), 1),
        "bleu": result["bleu"],
        "bleu_signature": result["bleu_signature"],
        # chrF and the length limits: recorded by evaluations made since they were added
        **{k: result[k] for k in ("chrf", "chrf++", "chrf_signature", "chrf++_signature", "hypotheses",
                                  "references", "lenpen", "max_len_a", "max_len_b") if k in result},
        "tokens_per_second": result["tokens_per_second"],
        "sentences_per_second": result["sentences_per_second"],
        "beam": result["beam"],
        "speed_setup": SPEED_SETUP,
        "cpu": cpu_model(),
        **gpu_fields(os.path.join(plan.step_dir(step), "step.log")),
    }


def gpu_fields(log_path: str) -> dict:
    """On a GPU: its name, and the training's peak device memory as fairseq's log shows it (the
    device's total less the least ``gb_free`` a train line reported; fairseq logs it on CUDA)."""
    import re

    import torch

    if not torch.cuda.is_available():
        return {}
    fields = {"gpu": torch.cuda.get_device_name(0)}
    try:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            free = [float(x) for x in re.findall(r"gb_free[=\s]+([\d.]+)", f.read())]
    except OSError:
        free = []
    if free:
        total = torch.cuda.get_device_properties(0).total_memory / 2 ** 30
        fields["peak_gpu_memory_gib"] = round(total - min(free), 2)
    return fields


def seqkd_record(plan: Plan, step, wall_seconds: float) -> dict:
    out = plan.planned_record(step)["data_bin"]
    with open(os.path.join(out, "seqkd_summary.json")) as f:
        summary = json.load(f)
    src, tgt = plan.data_source()[:2]
    try:
        quality = target_scores(plan.data_bin, out, src, tgt, summary.get("targets", 1))
    except ValueError as e:  # rows that are not the training pairs' (a monolingual source): no score
        print(f"[runner] {step['name']}: its targets are not scored against the references: {e}", flush=True)
        quality = {}
    return {"kind": "seqkd", "data_bin": out, "wall_seconds": round(wall_seconds, 1), "cpu": cpu_model(), **summary,
            **quality}


def cache_record(plan: Plan, step, wall_seconds: float) -> dict:
    """A teacher cache: what it holds, its size and what making it cost."""
    out = plan.planned_record(step)["cache_dir"]
    with open(os.path.join(out, "meta.json")) as f:
        meta = json.load(f)
    size = sum(os.path.getsize(os.path.join(out, name)) for name in os.listdir(out))
    return {"kind": "cache", "cache_dir": out, "teacher": step["cache"]["teacher"],
            "data": step["cache"].get("data") or "original", "top_k": meta["top_k"],
            "temperature": meta["temperature"], "value_dtype": meta["value_dtype"],
            "index_dtype": meta["index_dtype"], "sentences": meta["sentences"], "tokens": meta["tokens"],
            "bytes": size, "mb_per_1000_tokens": round(size / meta["tokens"] * 1000 / 1e6, 4),
            "teacher_seconds": meta["build_seconds"], "wall_seconds": round(wall_seconds, 1),
            "tokens_per_second": round(meta["tokens"] / max(meta["build_seconds"], 1e-9), 1), "cpu": cpu_model(),
            # a Hugging Face teacher's probability on pieces the student's vocabulary dropped
            **{k: v for k, v in meta.get("extra", {}).items() if k.startswith("teacher_mass_")}}


# what a pretrained model's own record of its making (``teacher.json``, as bench/hf_teacher.py
# writes it) adds to its step's record
PRETRAINED_FIELDS = ("what", "parameters", "train_pairs", "best_epoch", "train_seconds", "test_bleu", "test_chrf",
                     "test", "model_safetensors_sha256", "model_safetensors_bytes")


def pretrained_record(plan: Plan, step) -> dict:
    """A pretrained model: where it is, its content's SHA-256, and what its ``teacher.json`` says."""
    path = plan.planned_record(step)["checkpoint"]
    about = {}
    if os.path.isfile(os.path.join(path, "teacher.json")):
        with open(os.path.join(path, "teacher.json"), encoding="utf-8") as f:
            made = json.load(f)
        about = {k: made[k] for k in PRETRAINED_FIELDS if k in made}
        about["epochs"] = len(made.get("epochs", []))
    return {"kind": "pretrained", "checkpoint": path, "sha256": plan.model_digest(step["pretrained"]), **about}


def evaluated_updates(plan: Plan, step) -> int:
    """The update count of the checkpoint the recipe evaluates."""
    state = torch.load(plan.evaluated_checkpoint_path(step), map_location="cpu", weights_only=False)
    return state["optimizer_history"][-1]["num_updates"]


def stale_evaluation(record, evaluated_checkpoint: str) -> bool:
    """A finished training run whose record evaluated another checkpoint than the recipe asks for."""
    return record["kind"] == "train" and record.get("evaluated_checkpoint", "best") != evaluated_checkpoint


def run_fingerprint(record) -> str:
    """A short hash of what a finished step produced (its decoding checkpoint, its seq-KD
    training data, or a teacher cache's meta.json, which names the teacher by content hash):
    two runs of the same step with different results differ in it."""
    if record["kind"] == "pretrained":
        return record["sha256"][:12]
    if record["kind"] == "train":
        paths = [record["checkpoint"]]
    elif record["kind"] == "cache":
        paths = [os.path.join(record["cache_dir"], "meta.json")]
    else:
        paths = sorted(glob.glob(os.path.join(record["data_bin"], "train.*")))
    h = hashlib.sha1()
    for path in paths:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()[:12]


def record_path(plan: Plan, step) -> str:
    return os.path.join(plan.step_dir(step), "record.json")


def save(plan: Plan, step, record) -> None:
    with open(record_path(plan, step), "w") as f:
        json.dump(record, f, indent=2)


def local_records(plan: Plan) -> Dict[str, dict]:
    """The records of the finished steps in the work dir, completed (once, saved back) if
    written before records carried a fingerprint or a training run's own update count."""
    found = {}
    for step in plan.steps:
        path = record_path(plan, step)
        if os.path.isfile(path):
            with open(path) as f:
                record = json.load(f)
            changed = False
            if "run" not in record:
                record["run"] = run_fingerprint(record)
                changed = True
            if (record["kind"] == "train" and "trained_updates" not in record
                    and os.path.isfile(record["training_checkpoint"])):
                last = torch.load(record["training_checkpoint"], map_location="cpu", weights_only=False)
                record["trained_updates"] = last["optimizer_history"][-1]["num_updates"]
                changed = True
            if changed:
                save(plan, step, record)
            found[step["name"]] = record
    return found


def read_results(path: str) -> dict:
    """A results JSON file, or a one-line refusal naming it when it is missing or damaged (a write
    cut off): its rows are what a call would reuse."""
    if not os.path.isfile(path):
        raise DistillError(f"--reuse {path}: no such file (a results JSON that an earlier run wrote)")
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except ValueError as e:
        raise DistillError(f"{path} is damaged (not whole JSON: {e}): restore it from git or a copy, or move it "
                           f"away to go on without its rows") from None


def committed_rows(paths: Iterable[str], keys: Dict[str, str], own_name: str) -> Dict[str, dict]:
    """Rows of committed results files whose step name and key match a step of the recipe
    (``keys``: step name -> key). The recipe's own table (``<own_name>.json``) wins over other
    tables holding a step of the same name and key (e.g. a teacher that recipe retrained,
    shared with another recipe)."""
    found = {}
    own = f"{own_name}.json"
    for path in sorted(paths, key=lambda p: os.path.basename(p) == own):  # own file last
        meta = read_results(path)
        for r in meta.get("rows", []) + meta.get("seqkd", []):
            if r.get("key") and r.get("key") == keys.get(r.get("name")):
                found[r["name"]] = with_committed_outputs(r, os.path.dirname(os.path.abspath(path)))
    return found


def with_committed_outputs(row: dict, results_dir: str) -> dict:
    """A committed row whose test-set output was committed with it (``hypotheses_file``,
    ``references_file``): those files stand where a record has its own, so the row is
    paired-tested like a run of this session."""
    row = dict(row)
    for field, key in (("hypotheses_file", "hypotheses"), ("references_file", "references")):
        if row.get(field):
            row[key] = os.path.join(results_dir, row[field])
    return row


def uses(record_deps: Iterable[str], done: Dict[str, dict]) -> Dict[str, str]:
    """Which runs of its dependencies a run was made from."""
    return {d: done[d].get("run") for d in record_deps}
