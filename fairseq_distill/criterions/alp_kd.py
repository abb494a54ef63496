"""``--criterion alp_kd``: attention-based layer projection (Passban et al., AAAI 2021).

For student layer j and each non-padding position, attention over the teacher layers of
its group (all layers by default; buckets with ``--layer-map`` or a preset):

    α = softmax_k score(h_s^j, h_t^k),  C^j = Σ_k α_k h_t^k,  loss MSE(h_s^j, C^j)

``--alp-score dot`` is the paper's; with 256–512-wide states raw dot products are large,
so the softmax saturates to a one-hot choice of a single teacher layer: ``scaled_dot``
(divided by √d) and ``cosine`` keep the weights soft. Scores are computed in fp32.
``--alp-granularity sentence`` attends with, and matches, mean-pooled non-padding states
(the closest analogue of the paper's CLS vector). Teacher states of another width are
mapped to the student width by one learned linear map per side.
"""
from dataclasses import dataclass, field

import torch
import torch.nn as nn
from fairseq.criterions import register_criterion
from fairseq.dataclass import ChoiceEnum

from fairseq_distill.criterions.layer_kd import LayerKDConfig, LayerKDCriterion, warn_if_collapsible
from fairseq_distill.losses import alp_attention, alp_fuse, masked_mse, mean_pool


class AttentionFuser(nn.Module):
    def __init__(self, student_dim, teacher_dim, score="dot", granularity="token", normalize="none"):
        super().__init__()
        self.score, self.granularity, self.normalize = score, granularity, normalize
        self.project = nn.Identity() if student_dim == teacher_dim else nn.Linear(teacher_dim, student_dim)
        if student_dim != teacher_dim:
            warn_if_collapsible(normalize)
        self.last_alpha = {}  # pair index -> K x L x B weights of the last forward (for analysis)

    def forward(self, index, student_state, teacher_states, mask):
        teachers = self.project(torch.stack(teacher_states, dim=0).to(student_state.dtype))  # K x L x B x C
        if self.granularity == "sentence":
            student_state = mean_pool(student_state, mask)
            teachers = torch.stack([mean_pool(t, mask) for t in teachers], dim=0)
            mask = mask.new_ones(mask.size(0), 1)
        alpha = alp_attention(student_state, teachers, self.score)
        self.last_alpha[index] = alpha.detach()
        return masked_mse(student_state, alp_fuse(teachers, alpha), mask, self.normalize)


@dataclass
class ALPKDConfig(LayerKDConfig):
    alp_score: ChoiceEnum(["dot", "scaled_dot", "cosine"]) = field(
        default="dot", metadata={"help": "attention score between student and teacher states"}
    )
    alp_granularity: ChoiceEnum(["token", "sentence"]) = field(
        default="token", metadata={"help": "attend per position, or with mean-pooled sentence vectors"}
    )


@register_criterion("alp_kd", dataclass=ALPKDConfig)
class ALPKDCriterion(LayerKDCriterion):
    default_map = "all"

    def build_fuser(self, cfg, groups, student_dim, teacher_dim):
        return AttentionFuser(student_dim, teacher_dim, str(cfg.alp_score), str(cfg.alp_granularity),
                              self.layer_normalize)
