"""Decoding checkpoints: what a student becomes once distillation is over.

``export_decoding_checkpoint`` turns a training checkpoint into one that stock fairseq
loads as it is, on any torch version, without ``--user-dir``:

* contents are plain containers and tensors only (the legacy ``argparse.Namespace`` of
  the model options becomes a dict with ``_name``), so ``torch.load(weights_only=True)``
  accepts it;
* the task becomes fairseq's ``translation`` (teacher options dropped);
* criterion state (distillation-only parameters such as layer projections), optimizer
  state and training progress are dropped.

The plugin's own architectures (``deep_transformer*``, ``flexible_transformer``) are code
that stock fairseq does not have: their exports load in ``fairseq-generate`` only with
``--user-dir "$(fsd-options --user-dir)"``. Without it stock fairseq fails while formatting its own
"unknown model" message (``KeyError: "'no_progress_bar'"``), before anything a checkpoint
holds could explain it, so the export says so when it writes one (``needs_plugin``).
"""
import argparse
import dataclasses
import os
from typing import Optional

import torch
from omegaconf import OmegaConf, open_dict

from fairseq_distill import compat
from fairseq_distill.errors import DistillError


def plain_model_config(model_cfg) -> dict:
    if isinstance(model_cfg, argparse.Namespace):
        plain = dict(vars(model_cfg))
        plain.setdefault("_name", plain.get("arch"))
        return plain
    return dict(model_cfg)


def plain_task_config(task_cfg: dict) -> dict:
    from fairseq.tasks.translation import TranslationConfig

    keep = {f.name for f in dataclasses.fields(TranslationConfig)}
    plain = {k: v for k, v in task_cfg.items() if k in keep}
    plain["_name"] = "translation"
    return plain


def count_parameters(weights: dict) -> int:
    """Number of distinct parameters in a state dict (tied embeddings counted once)."""
    seen, total = set(), 0
    for tensor in weights.values():
        if not torch.is_tensor(tensor):
            continue
        key = (tensor.data_ptr(), tensor.numel())
        if key not in seen:
            seen.add(key)
            total += tensor.numel()
    return total


def plugin_architecture(arch: Optional[str]) -> bool:
    """True for an architecture registered by this plugin rather than by fairseq."""
    from fairseq.models import ARCH_MODEL_REGISTRY

    model = ARCH_MODEL_REGISTRY.get(arch)
    return model is not None and model.__module__.startswith("fairseq_distill.")


def load_checkpoint(path: str) -> dict:
    if not os.path.isfile(path):
        raise DistillError(f"checkpoint not found: '{path}'")
    return compat.load_checkpoint(path)


def is_decoding_checkpoint(path: str) -> bool:
    """Whether ``path`` is a decoding checkpoint this module wrote: it loads with torch's restricted
    unpickler and holds no optimizer state (a training checkpoint does)."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # not a checkpoint, or one that needs more than weights (a training checkpoint)
        return False
    history = state.get("optimizer_history") if isinstance(state, dict) else None
    return (bool(history) and history[-1].get("optimizer_name") == "none"
            and "last_optimizer_state" not in state)


def check_destination(src: str, dst: str):
    """``dst`` may be new or an earlier decoding checkpoint; never ``src`` itself, nor a training
    checkpoint or any other file (its optimizer state and training progress would be lost)."""
    from fairseq_distill.workdir import check_outputs

    check_outputs([("OUTPUT", dst)], [("CHECKPOINT", src)])
    if os.path.isdir(dst):
        raise DistillError(f"output '{dst}' is a directory; give the decoding checkpoint's file name, e.g. "
                           f"{os.path.join(dst, 'student.pt')}")
    if os.path.exists(dst) and not is_decoding_checkpoint(dst):
        raise DistillError(f"output '{dst}' exists and is not a decoding checkpoint written by this export (a "
                           f"training checkpoint, or another file): it would be lost, so it is not replaced; "
                           f"give a new path")


def export_decoding_checkpoint(src: str, dst: str, model_weights: Optional[dict] = None,
                               model_cfg_updates: Optional[dict] = None, state: Optional[dict] = None,
                               reset_progress: bool = False) -> dict:
    """Write the decoding checkpoint of ``src`` to ``dst``; returns a short summary.

    ``model_weights``/``model_cfg_updates`` let callers that reshape a model (sub-network
    export, layer extraction) reuse the same clean format; ``state`` is ``src`` already
    loaded; ``reset_progress`` stores 0 updates (a new model, not a continuation).
    """
    check_destination(src, dst)
    if state is None:
        state = load_checkpoint(src)
    cfg = OmegaConf.to_container(state["cfg"], resolve=True, enum_to_str=True)
    cfg["model"] = plain_model_config(cfg["model"])
    if model_cfg_updates:
        cfg["model"].update(model_cfg_updates)
    cfg["task"] = plain_task_config(cfg["task"])
    cfg["criterion"] = {"_name": "cross_entropy", "sentence_avg": False}
    if cfg.get("common"):
        cfg["common"]["user_dir"] = None
    weights = model_weights if model_weights is not None else state["model"]
    num_updates = 0 if reset_progress else (state.get("optimizer_history") or [{}])[-1].get("num_updates", 0)
    out = {
        "args": None,
        "cfg": cfg,
        "model": weights,
        # fairseq's loader reads the last entry of optimizer_history
        "optimizer_history": [
            {"criterion_name": "CrossEntropyCriterion", "optimizer_name": "none",
             "lr_scheduler_state": {}, "num_updates": num_updates}
        ],
        "task_state": dict(state.get("task_state") or {}),
        "extra_state": {},
    }
    os.makedirs(os.path.dirname(os.path.abspath(dst)), exist_ok=True)
    # written beside and moved into place: an interrupted export leaves any earlier one whole
    partial = dst + ".partial"
    torch.save(out, partial)
    # the point of the format: it loads with torch's restricted unpickler
    torch.load(partial, map_location="cpu", weights_only=True)
    os.replace(partial, dst)
    arch = cfg["model"].get("_name")
    return {
        "path": dst,
        "arch": arch,
        "needs_plugin": plugin_architecture(arch),
        "parameters": count_parameters(weights),
        "num_updates": num_updates,
        "dropped_criterion_tensors": len(state.get("criterion") or {}),
    }


def load_training_checkpoint(path: str, criterion: str) -> dict:
    """A training checkpoint of a run with ``criterion``, which must carry its criterion state
    (what analysis tools read: projections, alignment modules)."""
    state = load_checkpoint(path)
    if not state.get("criterion"):
        raise DistillError(f"{path} has no criterion state; use a training checkpoint "
                           f"(checkpoint_last.pt / checkpoint_best.pt), not an exported student")
    trained_with = state["cfg"].criterion._name
    if trained_with != criterion:
        raise DistillError(f"{path} was trained with criterion '{trained_with}', not {criterion}")
    if not state["cfg"].criterion.get("layer_project"):
        side = stored_layer_project(state)
        if side:
            with open_dict(state["cfg"]):
                state["cfg"].criterion.layer_project = side
    return state


def stored_layer_project(state) -> Optional[str]:
    """The side a layer-KD run's learned maps project (``teacher`` or ``student``), read from
    their weights: a run that took its method's default stored no ``--layer-project``, and
    pkd's and alp_kd's default changed from the teacher's side to the student's, so the
    options alone no longer rebuild such a criterion (nor ckd's, whose default maps the
    student's state where the widths differ). None where no map says (no layer
    term, or a square map)."""
    model = state["cfg"].model
    for key, value in state["criterion"].items():
        parts = key.split(".")
        if "fusers" not in parts or not key.endswith(".weight") or value.dim() != 2:
            continue
        side = parts[parts.index("fusers") + 1]  # encoder or decoder
        student_dim = getattr(model, f"{side}_embed_dim")
        out_dim, in_dim = value.shape
        if out_dim == student_dim and in_dim != student_dim:
            return "teacher"  # teacher states in, the student's width out
        if in_dim == student_dim and out_dim != student_dim:
            return "student"
    return None
