"""Intermediate-layer KD: the shared base of ``pkd``, ``ckd`` and ``alp_kd``.

    loss = β·CE_ls + η·word-KD + λ·Σ_sides Σ_(j, G_j) MSE(h_s^j, F_j(h_t^G_j))

over the non-padding positions of each side (source positions for the encoder, target
positions for the decoder). β = 1 − η − λ unless ``--ce-weight`` is given; defaults follow
Wu et al. (2020): η = 0.1, λ = 0.7. Layer l's state is the output of layer l before any
final layer norm; the embedding output (index 0) joins only with ``--kd-include-embedding``.
MSE is the mean over the feature dimension, summed over positions, layers and sides.

A subclass chooses the default layer map and the *fuser*: the module that turns the
teacher states of a group (and the student state) into the pair compared by the MSE. The
fusers' learned projections are criterion parameters: fairseq optimises them, saves them
in training checkpoints and restores them on resume; exported decoding checkpoints drop them.
"""
import logging
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import torch.nn as nn
from fairseq.dataclass import ChoiceEnum
from torch import Tensor

from fairseq_distill.criterions.word_kd import WordKDConfig, WordKDCriterion, check_fraction
from fairseq_distill.errors import DistillError
from fairseq_distill.features import FeatureRequest, Features, stack_shape
from fairseq_distill.layer_maps import format_layer_map, resolve_layer_map

logger = logging.getLogger(__name__)

SIDES = {"encoder": ("encoder",), "decoder": ("decoder",), "both": ("encoder", "decoder")}


@dataclass
class LayerKDConfig(WordKDConfig):
    kd_weight: float = field(default=0.1, metadata={"help": "η, weight of the word-level KD term"})
    layer_weight: float = field(default=0.7, metadata={"help": "λ, weight of the layer loss"})
    ce_weight: Optional[float] = field(
        default=None, metadata={"help": "β, weight of the label-smoothed CE (default 1 − η − λ)"}
    )
    kd_side: ChoiceEnum(["encoder", "decoder", "both"]) = field(
        default="encoder", metadata={"help": "which stack's layers to match"}
    )
    layer_map: str = field(
        default="",
        metadata={"help": "encoder layer map, e.g. '1,2,3|4,5,6' or '1-3|4-6', or a preset "
                  "(rc, oc, sc, cc, skip, all); default: the criterion's own"},
    )
    decoder_layer_map: str = field(default="", metadata={"help": "the same for the decoder"})
    layer_normalize: ChoiceEnum(["none", "l2"]) = field(
        default="none", metadata={"help": "l2: unit-normalise each vector before the MSE (PKD)"}
    )
    kd_include_embedding: bool = field(
        default=False, metadata={"help": "also match the embedding outputs (layer 0)"}
    )


Pair = Tuple[int, Tuple[int, ...]]  # (student layer, teacher layers); 0 is the embedding


class LayerKDCriterion(WordKDCriterion):
    """Base class: subclasses set ``default_map`` and implement :meth:`build_fuser`."""

    default_map = "skip"

    def __init__(self, task, cfg):
        super().__init__(task, cfg.sentence_avg, cfg.label_smoothing, cfg.ignore_prefix_size,
                         cfg.report_accuracy, cfg.kd_weight, cfg.kd_temperature)
        check_fraction("--layer-weight", cfg.layer_weight)
        if cfg.ce_weight is None and cfg.kd_weight + cfg.layer_weight > 1:
            raise DistillError(f"--kd-weight ({cfg.kd_weight}) + --layer-weight ({cfg.layer_weight}) "
                               f"exceed 1; lower them or give --ce-weight explicitly")
        self.layer_weight = cfg.layer_weight
        self.explicit_ce_weight = cfg.ce_weight
        self.layer_normalize = str(cfg.layer_normalize)
        self.sides = SIDES[str(cfg.kd_side)]

        teacher = task.load_teacher(criterion_name=type(self).__name__)
        if len(teacher) != 1:
            raise DistillError(f"{type(self).__name__} matches layers of one teacher; "
                               f"--teacher-path names {len(teacher)}")
        if task.student_shape is None:
            raise DistillError(f"{type(self).__name__} needs a layered Transformer student")
        teacher_shape = stack_shape(teacher.models[0])
        self.pairs: Dict[str, List[Pair]] = {}
        fusers = {}
        for side in self.sides:
            (s_layers, s_dim), (t_layers, t_dim) = task.student_shape[side], teacher_shape[side]
            spec = (cfg.layer_map if side == "encoder" else cfg.decoder_layer_map) or self.default_map_for(cfg)
            groups = resolve_layer_map(spec, t_layers, s_layers)
            logger.info(f"{type(self).__name__} {side} layer map ({t_layers} teacher -> {s_layers} "
                        f"student layers, '{spec}'): {format_layer_map(groups)}")
            pairs = [(j + 1, g) for j, g in enumerate(groups) if g]
            if cfg.kd_include_embedding:
                pairs.insert(0, (0, (0,)))
            self.pairs[side] = pairs
            fusers[side] = self.build_fuser(cfg, [g for _, g in pairs], s_dim, t_dim)
        self.fusers = nn.ModuleDict(fusers)

    @classmethod
    def build_criterion(cls, cfg, task):
        return cls(task, cfg)

    def default_map_for(self, cfg) -> str:
        return self.default_map

    def build_fuser(self, cfg, groups, student_dim, teacher_dim) -> nn.Module:
        raise NotImplementedError

    # -- the shared machinery ---------------------------------------------------------------

    def feature_request(self) -> FeatureRequest:
        return FeatureRequest(encoder_states="encoder" in self.sides, decoder_states="decoder" in self.sides)

    def ce_weight(self, terms) -> float:
        if terms and self.explicit_ce_weight is not None:
            return self.explicit_ce_weight
        return super().ce_weight(terms)

    def distillation_terms(self, student: Features, teachers: List[Features], sample):
        terms = super().distillation_terms(student, teachers, sample)
        if self.layer_weight > 0:
            total = sum(self.side_loss(side, student, teachers[0], sample) for side in self.sides)
            terms["layer_loss"] = (self.layer_weight, total)
        return terms

    def side_mask(self, side: str, student: Features, sample) -> Tensor:
        """B x L, True at real (non-padding) positions of that side."""
        if side == "encoder":
            pad = student.encoder_padding_mask
            if pad is None:
                pad = sample["net_input"]["src_tokens"].eq(self.task.source_dictionary.pad())
            return ~pad
        return sample["target"].ne(self.padding_idx)

    def side_loss(self, side: str, student: Features, teacher: Features, sample) -> Tensor:
        s_states = student.encoder_states if side == "encoder" else student.decoder_states
        t_states = teacher.encoder_states if side == "encoder" else teacher.decoder_states
        mask = self.side_mask(side, student, sample)
        fuser = self.fusers[side]
        return sum(
            fuser(i, s_states[j], [t_states[k] for k in group], mask)
            for i, (j, group) in enumerate(self.pairs[side])
        )


def warn_if_collapsible(normalize: str):
    """A learned map of the teacher's states, compared with the student's by plain MSE, can
    shrink both sides towards a constant: the loss goes to zero and the student unlearns."""
    if normalize == "none":
        logger.warning(
            "a learned projection of the teacher's states compared by unnormalised MSE lets both sides "
            "shrink towards a constant (PKD with it on Multi30k: 5.49 BLEU against 25.10 without KD); "
            "--layer-normalize l2 (or, for ckd, --ckd-project student) avoids that")
