"""Frozen teacher models attached to student training.

A :class:`TeacherEnsemble` is deliberately *not* an ``nn.Module``: stored on the task or
criterion it is never registered as a submodule, so its parameters never reach the
optimizer, the fp16 cast, the DDP wrapper, ``model.train()``/``criterion.train()`` or a
saved checkpoint. It moves itself to the student's device and dtype on first use and
always runs in eval mode under ``torch.no_grad()``.
"""
import logging
import os
from typing import List, Sequence

import torch
import torch.nn as nn
from fairseq.data import Dictionary
from fairseq.models import FairseqEncoderDecoderModel

from fairseq_distill import compat
from fairseq_distill.errors import DistillError
from fairseq_distill.data_bin import dictionaries_of_checkpoint
from fairseq_distill.features import FeatureRequest, Features, run_with_features

logger = logging.getLogger(__name__)

def split_teacher_paths(spec: str) -> List[str]:
    paths = [p for p in spec.split(":") if p.strip()]
    if not paths:
        raise DistillError(
            f"--teacher-path '{spec}' names no checkpoint; give one path, or several separated by ':'"
        )
    return paths


def check_same_dictionary(side: str, student: Dictionary, teacher_symbols: Sequence[str], path: str):
    for index, (ours, theirs) in enumerate(zip(student.symbols, teacher_symbols)):
        if ours != theirs:
            raise DistillError(
                f"teacher {path}: its {side} dictionary differs from the student's at index "
                f"{index}: teacher has '{theirs}', student has '{ours}'. Teacher and student must "
                f"be binarized with the same dictionaries (fairseq-preprocess --srcdict/--tgtdict)."
            )
    if len(student.symbols) != len(teacher_symbols):
        raise DistillError(
            f"teacher {path}: its {side} dictionary has {len(teacher_symbols)} symbols, the "
            f"student's has {len(student.symbols)} (identical up to the shorter one). Teacher and "
            f"student must be binarized with the same dictionaries."
        )


SIZE_ONLY_FLAG = "--allow-size-only-dictionary-check"


def check_teacher_dictionaries(state, path, source_dict: Dictionary, target_dict: Dictionary,
                               allow_size_only: bool = False):
    """The teacher must share the data's dictionaries, or its ids mean other words.

    When neither the checkpoint nor its training data directory holds its dictionaries,
    this fails unless ``allow_size_only``: then only the vocabulary sizes are compared.
    """
    found, searched = dictionaries_of_checkpoint(state, path)
    if found is not None:
        check_same_dictionary("source", source_dict, found[0], path)
        check_same_dictionary("target", target_dict, found[1], path)
        return
    if not allow_size_only:
        where = ", ".join(f"'{d}'" for d in searched) or "none (the checkpoint names no data directory)"
        raise DistillError(
            f"teacher {path}: its dictionaries cannot be found, so it cannot be checked against the "
            f"data: they are not stored in the checkpoint (it was not trained with --task "
            f"translation_distill) and no dict.*.txt was found in its training data directory "
            f"(looked in: {where}). Run from the directory it was trained in, or, if you are sure it "
            f"was trained with these dictionaries, pass {SIZE_ONLY_FLAG} to compare vocabulary sizes only"
        )
    weights = state["model"]
    for side, key, dictionary in (
        ("source", "encoder.embed_tokens.weight", source_dict),
        ("target", "decoder.embed_tokens.weight", target_dict),
    ):
        if key in weights and weights[key].size(0) != len(dictionary):
            raise DistillError(
                f"teacher {path}: its {side} embedding has {weights[key].size(0)} rows, the "
                f"student's {side} dictionary has {len(dictionary)} symbols; they must be the same dictionary"
            )
    logger.warning(
        f"teacher {path}: its dictionaries were not found (neither in the checkpoint nor in its "
        f"training data directory); {SIZE_ONLY_FLAG}: only the vocabulary sizes were checked"
    )


def pretrained_kind(directory: str) -> str:
    """What a model directory looks like, for the error that refuses it as a teacher."""
    names = set(os.listdir(directory))
    if "model.bin" in names and "config.json" in names:
        return " (it looks like a CTranslate2 model: model.bin, config.json)"
    if "config.json" in names and names & {"pytorch_model.bin", "model.safetensors", "tf_model.h5"}:
        return " (it looks like a Hugging Face model: config.json and weights)"
    return ""


def read_teacher_checkpoint(path: str) -> dict:
    """A teacher checkpoint's state, with clear errors for a missing or unreadable file."""
    if os.path.isdir(path):
        raise DistillError(f"teacher '{path}' is a directory, not a fairseq checkpoint file{pretrained_kind(path)}. "
                           f"A Hugging Face model directory (MarianMT, M2M100/NLLB) teaches every term as --teacher-path "
                           f"of fairseq-train and fsd-cache-teacher; a CTranslate2 model teaches by sequence-level KD: "
                           f"fsd-seqkd --teacher-ctranslate2 DIR, or translate the training source yourself and pass "
                           f"fsd-seqkd --teacher-translations FILE")
    if not os.path.isfile(path):
        raise DistillError(f"teacher checkpoint not found: '{path}' (no such file)")
    if not os.access(path, os.R_OK):
        raise DistillError(f"teacher checkpoint '{path}' is not readable (permissions)")
    try:
        state = compat.load_checkpoint(path)
    except Exception as e:  # a corrupt or non-checkpoint file: say which one
        raise DistillError(f"cannot read teacher checkpoint '{path}': {type(e).__name__}: {e}") from e
    if not isinstance(state, dict) or "model" not in state or state.get("cfg") is None:
        raise DistillError(f"'{path}' is not a fairseq checkpoint (no 'model' weights and 'cfg')")
    return state


def load_teacher(path: str, task, allow_size_only: bool = False) -> nn.Module:
    """Load one frozen teacher from ``path`` for a task holding the student's dictionaries: a
    fairseq checkpoint, or a Hugging Face model directory (:mod:`fairseq_distill.teacher.huggingface`)."""
    from fairseq_distill.teacher import huggingface

    if huggingface.is_model_dir(path):
        data = task.cfg.data.split(":")[0] if getattr(task.cfg, "data", None) else None
        return huggingface.load(path, task.source_dictionary, task.target_dictionary, data)
    state = read_teacher_checkpoint(path)
    check_teacher_dictionaries(state, path, task.source_dictionary, task.target_dictionary, allow_size_only)

    model_cfg = state["cfg"].model
    try:
        model = compat.build_model(model_cfg, task)
    except Exception as e:
        arch = getattr(model_cfg, "_name", None) or getattr(model_cfg, "arch", None)
        raise DistillError(f"cannot build the teacher model of '{path}' (architecture '{arch}'): {e}") from e
    if not isinstance(model, FairseqEncoderDecoderModel):
        raise DistillError(
            f"teacher '{path}' is a {type(model).__name__}, not an encoder-decoder translation "
            f"model (FairseqEncoderDecoderModel)"
        )
    model.load_state_dict(state["model"], strict=True, model_cfg=model_cfg)
    model.requires_grad_(False)
    model.eval()
    compat.use_unfused_encoder_layers(model)
    return model


class TeacherEnsemble:
    """One or more frozen teachers; run them with :meth:`features`."""

    def __init__(self, models: Sequence[nn.Module], paths: Sequence[str]):
        self.models = list(models)
        self.paths = list(paths)

    @classmethod
    def load(cls, spec: str, task, allow_size_only: bool = False) -> "TeacherEnsemble":
        paths = split_teacher_paths(spec)
        models = [load_teacher(p, task, allow_size_only) for p in paths]
        for p, m in zip(paths, models):
            n = sum(t.numel() for t in m.parameters())
            logger.info(f"teacher {p}: {type(m).__name__}, {n:,} parameters, frozen")
        return cls(models, paths)

    def __len__(self):
        return len(self.models)

    def parameters(self):
        for m in self.models:
            yield from m.parameters()

    def _follow(self, like: torch.Tensor):
        """Put the teachers on the student's device and dtype (done once, then a no-op)."""
        for m in self.models:
            p = next(m.parameters())
            if p.device != like.device or p.dtype != like.dtype:
                m.to(device=like.device, dtype=like.dtype)

    def features(self, net_input: dict, request: FeatureRequest, like: torch.Tensor) -> List[Features]:
        """Each teacher's :class:`Features` for a batch; ``like`` is a student parameter."""
        self._follow(like)
        outputs = []
        with torch.no_grad():
            for m in self.models:
                m.eval()  # cheap, and guards against anyone having called .train()
                # a teacher kind of its own (a Hugging Face model) answers in fairseq's layout itself
                # (a method of its class, never a submodule that happens to be called so)
                if callable(getattr(type(m), "features", None)):
                    outputs.append(m.features(net_input, request))
                else:
                    outputs.append(run_with_features(m, net_input, request))
        return outputs
