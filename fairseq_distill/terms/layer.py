"""Intermediate-layer KD: ``Σ_sides Σ_(j, G_j) MSE(h_s^j, F_j(h_t^G_j))`` over real positions.

One term for PKD (Sun et al., 2019), CKD (Wu et al., EMNLP 2020) and ALP-KD (Passban et
al., AAAI 2021); they differ in the default layer map and the *fuser*
(:mod:`fairseq_distill.terms.fusers`):

* ``pkd``: student layer j ← one teacher layer (evenly spaced ``skip`` map), unit-normalised
  states (``--layer-normalize l2`` by default), a learned projection if widths differ;
* ``ckd``: student layer j ← a group of teacher layers, concatenated and fused by a learned
  linear map (``--ckd-combination`` presets or ``--layer-map``; ``--ckd-project``);
* ``alp_kd``: student layer j attends over the teacher layers of its group (all by default).

Layer l's state is the output of layer l before any final layer norm; the embedding output
(index 0) joins only with ``--kd-include-embedding``. Source positions count for the
encoder, target positions for the decoder. MSE is the mean over the feature dimension,
summed over positions, layers and sides.
"""
import logging
from typing import Dict, List, Tuple

import torch.nn as nn
from torch import Tensor

from fairseq_distill.errors import DistillError
from fairseq_distill.features import FeatureRequest, Features
from fairseq_distill.layer_maps import format_layer_map, resolve_layer_map
from fairseq_distill.terms.base import DistillationTerm, TermContext, check_fraction
from fairseq_distill.terms.fusers import AttentionFuser, CombinationFuser

logger = logging.getLogger(__name__)

SIDES = {"encoder": ("encoder",), "decoder": ("decoder",), "both": ("encoder", "decoder")}
# per method: the layer map used when none is given, and the state normalisation
METHODS = {
    "pkd": {"map": "skip", "normalize": "l2"},
    "ckd": {"map": "rc", "normalize": "none"},
    "alp_kd": {"map": "all", "normalize": "none"},
}

Pair = Tuple[int, Tuple[int, ...]]  # (student layer, teacher layers); 0 is the embedding


class LayerKDTerm(DistillationTerm):
    name = "layer"

    def __init__(self, method: str, weight: float, context: TermContext, side: str = "encoder",
                 layer_map: str = "", decoder_layer_map: str = "", normalize: str = "",
                 include_embedding: bool = False, ckd_combination: str = "rc",
                 ckd_project: str = "teacher", alp_score: str = "dot", alp_granularity: str = "token"):
        if method not in METHODS:
            raise DistillError(f"unknown layer-KD method '{method}'; valid: {', '.join(METHODS)}")
        check_fraction("--layer-weight", weight)
        super().__init__(weight)
        self.method = method
        self.sides = SIDES[side]
        self.normalize = normalize or METHODS[method]["normalize"]
        self.source_pad, self.target_pad = context.source_pad, context.target_pad
        context.single_teacher(method)
        student_shape, teacher_shape = context.student_layout(method), context.teacher_shape
        default_map = ckd_combination if method == "ckd" else METHODS[method]["map"]

        self.pairs: Dict[str, List[Pair]] = {}
        fusers = {}
        for s in self.sides:
            (s_layers, s_dim), (t_layers, t_dim) = student_shape[s], teacher_shape[s]
            spec = (layer_map if s == "encoder" else decoder_layer_map) or default_map
            groups = resolve_layer_map(spec, t_layers, s_layers)
            logger.info(f"{method} {s} layer map ({t_layers} teacher -> {s_layers} student layers, "
                        f"'{spec}'): {format_layer_map(groups)}")
            pairs = [(j + 1, g) for j, g in enumerate(groups)]
            if include_embedding:
                pairs.insert(0, (0, (0,)))
            self.pairs[s] = pairs
            groups = [g for _, g in pairs]
            if method == "alp_kd":
                fusers[s] = AttentionFuser(s_dim, t_dim, alp_score, alp_granularity, self.normalize)
            else:
                if method == "pkd":
                    wide = [g for g in groups if len(g) > 1]
                    if wide:
                        raise DistillError(
                            f"pkd matches each student layer to one teacher layer; the map has group "
                            f"{{{','.join(map(str, wide[0]))}}}: use ckd for groups")
                    ckd_project = "teacher"
                fusers[s] = CombinationFuser(groups, s_dim, t_dim, ckd_project, self.normalize)
        self.fusers = nn.ModuleDict(fusers)

    @classmethod
    def from_config(cls, cfg, context: TermContext, method: str) -> "LayerKDTerm":
        return cls(method, cfg.layer_weight, context, side=str(cfg.kd_side), layer_map=cfg.layer_map,
                   decoder_layer_map=cfg.decoder_layer_map,
                   normalize=str(cfg.layer_normalize or ""), include_embedding=cfg.kd_include_embedding,
                   ckd_combination=str(getattr(cfg, "ckd_combination", "rc")),
                   ckd_project=str(getattr(cfg, "ckd_project", "teacher")),
                   alp_score=str(getattr(cfg, "alp_score", "dot")),
                   alp_granularity=str(getattr(cfg, "alp_granularity", "token")))

    @property
    def request(self) -> FeatureRequest:
        return FeatureRequest(encoder_states="encoder" in self.sides, decoder_states="decoder" in self.sides)

    def side_mask(self, side: str, student: Features, sample) -> Tensor:
        """B x L, True at real (non-padding) positions of that side."""
        if side == "encoder":
            pad = student.encoder_padding_mask
            if pad is None:
                pad = sample["net_input"]["src_tokens"].eq(self.source_pad)
            return ~pad
        return sample["target"].ne(self.target_pad)

    def side_loss(self, side: str, student: Features, teacher: Features, sample) -> Tensor:
        s_states = student.encoder_states if side == "encoder" else student.decoder_states
        t_states = teacher.encoder_states if side == "encoder" else teacher.decoder_states
        mask = self.side_mask(side, student, sample)
        fuser = self.fusers[side]
        return sum(
            fuser(i, s_states[j], [t_states[k] for k in group], mask)
            for i, (j, group) in enumerate(self.pairs[side])
        )

    def forward(self, student: Features, teachers: List[Features], sample) -> Tensor:
        return sum(self.side_loss(side, student, teachers[0], sample) for side in self.sides)
