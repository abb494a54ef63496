"""``--criterion ckd``: combinatorial intermediate-layer KD (Wu et al., EMNLP 2020).

Each student layer j learns from a *group* of teacher layers, none skipped. The group's
states are concatenated and fused by a learned linear map F_j(h) = W_j [h_t^1; …; h_t^k] + b_j
(teacher side, W_j ∈ R^{d_s × k·d_t}, the paper's form), or, with ``--ckd-project student``,
the student state is projected to k·d_t instead (the authors' released variant). A one-layer
group of equal width needs no projection: PKD is the special case of one-layer groups.

    --ckd-combination {rc,oc,sc,cc}  preset maps (see fairseq_distill/layer_maps.py)
    --layer-map "1,2,3|4,5,6"        any explicit map
"""
from dataclasses import dataclass, field
from typing import Sequence, Tuple

import torch
import torch.nn as nn
from fairseq.criterions import register_criterion
from fairseq.dataclass import ChoiceEnum

from fairseq_distill.criterions.layer_kd import LayerKDConfig, LayerKDCriterion, warn_if_collapsible
from fairseq_distill.losses import masked_mse


class CombinationFuser(nn.Module):
    """One optional linear map per (student layer, teacher group) pair."""

    def __init__(self, groups: Sequence[Tuple[int, ...]], student_dim: int, teacher_dim: int,
                 project: str = "teacher", normalize: str = "none"):
        super().__init__()
        self.project, self.normalize = project, normalize
        maps = []
        for group in groups:
            fused_dim = len(group) * teacher_dim
            if fused_dim == student_dim and len(group) == 1:
                maps.append(nn.Identity())
            elif project == "teacher":
                maps.append(nn.Linear(fused_dim, student_dim))
                warn_if_collapsible(normalize)
            else:
                maps.append(nn.Linear(student_dim, fused_dim))
        self.maps = nn.ModuleList(maps)

    def forward(self, index, student_state, teacher_states, mask):
        concat = torch.cat(teacher_states, dim=-1) if len(teacher_states) > 1 else teacher_states[0]
        linear = self.maps[index]
        if self.project == "teacher":
            # cast the frozen teacher's states to the projection's dtype (they may differ under fp16)
            return masked_mse(student_state, linear(concat.to(student_state.dtype)), mask, self.normalize)
        return masked_mse(linear(student_state), concat, mask, self.normalize)


@dataclass
class CKDConfig(LayerKDConfig):
    ckd_combination: ChoiceEnum(["rc", "oc", "sc", "cc"]) = field(
        default="rc", metadata={"help": "preset layer map when --layer-map is not given"}
    )
    ckd_project: ChoiceEnum(["teacher", "student"]) = field(
        default="teacher",
        metadata={"help": "teacher: fuse the concatenated teacher states to the student width "
                  "(paper); student: project the student state to k·d_t (released code)"},
    )


@register_criterion("ckd", dataclass=CKDConfig)
class CKDCriterion(LayerKDCriterion):
    def default_map_for(self, cfg) -> str:
        return str(cfg.ckd_combination)

    def build_fuser(self, cfg, groups, student_dim, teacher_dim):
        return CombinationFuser(groups, student_dim, teacher_dim, str(cfg.ckd_project), self.layer_normalize)
