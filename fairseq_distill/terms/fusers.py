"""How layer KD turns a group of teacher states (and the student state) into the pair it
compares: CKD's fused linear map (PKD is its one-layer case) and ALP-KD's attention over
teacher layers. A fuser's projections are learned parameters of the criterion. The pair is
compared by :func:`~fairseq_distill.losses.masked_mse` with the fuser's ``normalize`` and
``reduction`` (over the feature dimension: ``mean`` or ``sum``)."""
import logging
from typing import Sequence, Tuple

import torch
import torch.nn as nn

from fairseq_distill.losses import alp_attention, alp_fuse, masked_mse, mean_pool

logger = logging.getLogger(__name__)


def warn_teacher_side_projection(equal_widths: bool = False):
    """A learned map of the teacher's states makes the target movable: the map and the student
    can settle on one constant vector (with unit-normalised states, one shared direction, so
    normalising does not prevent it), the layer loss vanishes and the student unlearns. A map
    of the student's state keeps the teacher's own states as a fixed target. At equal widths
    the map is CKD's own fused map (Eq. 3, --ckd-form paper), which collapsed there too
    (configs/papers.yaml). A map frozen at its initialisation (--layer-freeze-projection) is a
    fixed target as well: its fusers are built with ``frozen`` and say nothing."""
    if equal_widths:
        logger.warning(
            "the teacher's states are fused by a learned map trained with the student (the CKD "
            "paper's form, --ckd-project teacher); at the teacher's width too it can collapse: map "
            "and student settle on states the layer loss matches while the student unlearns, as in "
            "configs/papers.yaml (README.md, 'Reproducing the papers'). The collapse watch warns if it "
            "happens (--stop-on-collapse ends the run); the authors' released form keeps the "
            "teacher's states as a fixed target: --ckd-form released")
        return
    logger.warning(
        "the teacher's states go through a learned projection (the widths differ): the projection "
        "and the student can collapse onto one vector or direction, unit-normalised or not, so the "
        "layer loss vanishes while the student unlearns; a student-side projection keeps the "
        "teacher's states as a fixed target: --layer-project student (for ckd also "
        "--ckd-form released)")


class CombinationFuser(nn.Module):
    """One optional linear map per (student layer, teacher group) pair."""

    def __init__(self, groups: Sequence[Tuple[int, ...]], student_dim: int, teacher_dim: int,
                 project: str = "teacher", normalize: str = "none", reduction: str = "mean",
                 frozen: bool = False):
        super().__init__()
        self.project, self.normalize, self.reduction = project, normalize, reduction
        maps = []
        for group in groups:
            fused_dim = len(group) * teacher_dim
            if fused_dim == student_dim and len(group) == 1:
                maps.append(nn.Identity())
            elif project == "teacher":
                maps.append(nn.Linear(fused_dim, student_dim))
            else:
                maps.append(nn.Linear(student_dim, fused_dim))
        self.maps = nn.ModuleList(maps)
        if project == "teacher" and not frozen and any(isinstance(m, nn.Linear) for m in maps):  # once per fuser
            warn_teacher_side_projection(equal_widths=student_dim == teacher_dim)

    def forward(self, index, student_state, teacher_states, mask):
        concat = torch.cat(teacher_states, dim=-1) if len(teacher_states) > 1 else teacher_states[0]
        linear = self.maps[index]
        if self.project == "teacher":
            # cast the frozen teacher's states to the projection's dtype (they may differ under fp16)
            return masked_mse(student_state, linear(concat.to(student_state.dtype)), mask, self.normalize,
                              self.reduction)
        return masked_mse(linear(student_state), concat, mask, self.normalize, self.reduction)


class AttentionFuser(nn.Module):
    """ALP-KD: attention over the group's teacher layers, per position or per sentence."""

    def __init__(self, student_dim, teacher_dim, score="dot", granularity="token", normalize="none",
                 reduction="mean", side="teacher", frozen=False):
        """``side``: which states the learned map brings to the other's width when the widths
        differ (``teacher``: the teacher's, attention and loss in the student width;
        ``student``: the student's, attention and loss in the teacher width). ``frozen``: the map
        will be kept at its initialisation (no collapse warning)."""
        super().__init__()
        self.score, self.granularity, self.normalize = score, granularity, normalize
        self.reduction, self.side = reduction, side
        if student_dim == teacher_dim:
            self.project = nn.Identity()
        elif side == "student":
            self.project = nn.Linear(student_dim, teacher_dim)
        else:
            self.project = nn.Linear(teacher_dim, student_dim)
            if not frozen:
                warn_teacher_side_projection()
        self.last_alpha = {}  # pair index -> K x L x B weights of the last forward (for analysis)

    def forward(self, index, student_state, teacher_states, mask):
        teachers = torch.stack(teacher_states, dim=0).to(student_state.dtype)  # K x L x B x C_t
        if self.side == "student":
            student_state = self.project(student_state)
        else:
            teachers = self.project(teachers)
        if self.granularity == "sentence":
            student_state = mean_pool(student_state, mask)
            teachers = torch.stack([mean_pool(t, mask) for t in teachers], dim=0)
            mask = mask.new_ones(mask.size(0), 1)
        alpha = alp_attention(student_state, teachers, self.score)
        self.last_alpha[index] = alpha.detach()
        return masked_mse(student_state, alp_fuse(teachers, alpha), mask, self.normalize, self.reduction)
