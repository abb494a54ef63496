"""Distillation loss terms as plain functions of tensors (no fairseq objects).

Every term is *summed* over the positions it covers, like fairseq's own criterions; the
criterion divides by ``sample_size`` once, in the gradient normalisation.
All arithmetic is done in fp32 whatever the training dtype.
"""
import math
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor


def ensemble_log_probs(teacher_logits: Sequence[Tensor], temperature: float = 1.0) -> Tensor:
    """log of the teachers' averaged probabilities at temperature τ: log (1/n) Σ_i softmax(z_i/τ)."""
    if len(teacher_logits) == 0:
        raise ValueError("ensemble_log_probs needs at least one teacher")
    log_probs = [F.log_softmax(z.float() / temperature, dim=-1) for z in teacher_logits]
    if len(log_probs) == 1:
        return log_probs[0]
    stacked = torch.stack(log_probs, dim=0)
    return torch.logsumexp(stacked, dim=0) - math.log(len(log_probs))


def word_kd_loss(
    student_logits: Tensor,
    teacher_log_probs: Tensor,
    non_pad_mask: Tensor,
    temperature: float = 1.0,
) -> Tensor:
    """τ² · Σ_{non-pad tokens} KL(p_teacher^τ ‖ p_student^τ).

    ``student_logits``: B x T x V raw logits. ``teacher_log_probs``: B x T x V, already at
    temperature τ (see :func:`ensemble_log_probs`). ``non_pad_mask``: B x T, True where a
    real target token is. The τ² factor keeps gradient magnitudes comparable across τ
    (Hinton et al., 2015).
    """
    student_log_probs = F.log_softmax(student_logits.float() / temperature, dim=-1)
    teacher_probs = teacher_log_probs.exp()
    # p·(log p − log q), with 0·log 0 = 0 where the teacher's probability underflows
    pointwise = torch.where(
        teacher_probs > 0,
        teacher_probs * (teacher_log_probs - student_log_probs),
        torch.zeros_like(teacher_probs),
    )
    per_token = pointwise.sum(dim=-1)
    per_token = per_token.masked_fill(~non_pad_mask, 0.0)
    return per_token.sum() * (temperature**2)


def masked_mse(student: Tensor, teacher: Tensor, mask: Tensor, normalize: str = "none") -> Tensor:
    """Σ_{real positions} mean_d (s − t)², states L x B x C (fairseq's layout), mask B x L.

    ``normalize="l2"`` first scales every vector to unit length (as PKD does).
    """
    s, t = student.float(), teacher.float()
    if normalize == "l2":
        s, t = F.normalize(s, dim=-1), F.normalize(t, dim=-1)
    per_position = (s - t).pow(2).mean(dim=-1)  # L x B
    return per_position.masked_fill(~mask.t(), 0.0).sum()


def mean_pool(states: Tensor, mask: Tensor) -> Tensor:
    """Average of the real positions: L x B x C, mask B x L -> 1 x B x C."""
    weights = mask.t().unsqueeze(-1).to(states.dtype)  # L x B x 1
    return ((states * weights).sum(0) / weights.sum(0).clamp(min=1)).unsqueeze(0)


def alp_attention(student: Tensor, teachers: Tensor, score: str = "dot") -> Tensor:
    """ALP-KD weights over teacher layers, per position: softmax_k score(h_s, h_t^k).

    ``student``: L x B x C; ``teachers``: K x L x B x C (projected to the student width).
    Returns K x L x B. Scores in fp32: ``dot`` (the paper), ``scaled_dot`` (/√C), ``cosine``.
    """
    s, t = student.float().unsqueeze(0), teachers.float()
    if score == "cosine":
        scores = F.cosine_similarity(s, t, dim=-1)
    else:
        scores = (s * t).sum(-1)
        if score == "scaled_dot":
            scores = scores / math.sqrt(s.size(-1))
    return torch.softmax(scores, dim=0)


def alp_fuse(teachers: Tensor, alpha: Tensor) -> Tensor:
    """C = Σ_k α_k h_t^k: teachers K x L x B x C, alpha K x L x B -> L x B x C."""
    return (alpha.unsqueeze(-1) * teachers.float()).sum(0)
