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


def log_probs_at(logits: Tensor, temperature: float = 1.0) -> Tensor:
    """log softmax(z/τ) in fp32 (no extra pass over the B x T x V tensor when τ = 1)."""
    logits = logits.float()
    return F.log_softmax(logits if temperature == 1.0 else logits / temperature, dim=-1)


def ensemble_log_probs(teacher_logits: Sequence[Tensor], temperature: float = 1.0) -> Tensor:
    """log of the teachers' averaged probabilities at temperature τ: log (1/n) Σ_i softmax(z_i/τ)."""
    if len(teacher_logits) == 0:
        raise ValueError("ensemble_log_probs needs at least one teacher")
    log_probs = [log_probs_at(z, temperature) for z in teacher_logits]
    if len(log_probs) == 1:
        return log_probs[0]
    stacked = torch.stack(log_probs, dim=0)
    return torch.logsumexp(stacked, dim=0) - math.log(len(log_probs))


def word_kd_loss(
    student_log_probs: Tensor,
    teacher_log_probs: Tensor,
    non_pad_mask: Tensor,
    temperature: float = 1.0,
) -> Tensor:
    """τ² · Σ_{non-pad tokens} KL(p_teacher^τ ‖ p_student^τ).

    ``student_log_probs``, ``teacher_log_probs``: B x T x V, already at temperature τ (see
    :func:`log_probs_at`, :func:`ensemble_log_probs`). ``non_pad_mask``: B x T, True where a
    real target token is. The τ² factor keeps gradient magnitudes comparable across τ
    (Hinton et al., 2015).
    """
    teacher_probs = teacher_log_probs.exp()
    # Σ_v p·(log p − log q) as one fused dot product per token (this term runs on B x T x V
    # every step, so passes over that tensor are the cost). Clamping log p keeps 0·log 0 = 0
    # where the teacher's probability underflows, without a masked select.
    finite_log_p = teacher_log_probs.clamp(min=torch.finfo(teacher_log_probs.dtype).min)
    per_token = torch.linalg.vecdot(teacher_probs, finite_log_p - student_log_probs)
    per_token = per_token.masked_fill(~non_pad_mask, 0.0)
    return per_token.sum() * (temperature**2)


MSE_REDUCTIONS = ("sum", "mean")


def topk_word_kd_loss(
    student_log_probs: Tensor,
    teacher_top_log_probs: Tensor,
    teacher_top_indices: Tensor,
    non_pad_mask: Tensor,
    temperature: float = 1.0,
    remainder: bool = True,
) -> Tensor:
    """τ² · Σ_{non-pad tokens} KL over the teacher's top-k tokens plus one remainder bucket.

    ``student_log_probs``: B x T x V at temperature τ; ``teacher_top_log_probs``,
    ``teacher_top_indices``: B x T x K, the teacher's K most probable tokens (at τ) and their
    log-probabilities; ``non_pad_mask``: B x T. With p_k, q_k the teacher's and student's
    probabilities of the K tokens, r = 1 − Σ p_k and s = 1 − Σ q_k the mass of all others::

        KL_k = Σ_k p_k·(log p_k − log q_k) + r·(log r − log s)

    the KL divergence between the two distributions coarsened to K + 1 outcomes (the K
    tokens, "any other token"); with K = V (``remainder=False``) it is the full KL of
    :func:`word_kd_loss`. r is clamped at 0 (rounding of stored values can make Σ p_k exceed
    1) and s at 1e-12, so that a student with no mass left outside the K tokens gets a large
    but finite loss and no NaN gradient.
    """
    log_p = teacher_top_log_probs.float()
    log_q = student_log_probs.gather(-1, teacher_top_indices)
    p = log_p.exp()  # exp(−inf) = 0 at padding
    finite_log_p = log_p.clamp(min=torch.finfo(log_p.dtype).min)
    per_token = (p * (finite_log_p - log_q)).sum(-1)
    if remainder:
        r = (1.0 - p.sum(-1)).clamp(min=0.0)
        s = (1.0 - log_q.exp().sum(-1)).clamp(min=1e-12)
        per_token = per_token + torch.where(r > 0, r * (r.clamp(min=1e-30).log() - s.log()), torch.zeros_like(r))
    per_token = per_token.masked_fill(~non_pad_mask, 0.0)
    return per_token.sum() * (temperature**2)


def masked_mse(student: Tensor, teacher: Tensor, mask: Tensor, normalize: str = "none",
               reduction: str = "mean") -> Tensor:
    """Σ_{real positions} of the squared difference reduced over the feature dimension d,
    states L x B x C (fairseq's layout), mask B x L.

    ``reduction="mean"``: mean_d (s − t)², the mean-square error (the CKD and ALP-KD papers);
    ``"sum"``: Σ_d (s − t)² = ‖s − t‖², the squared L2 distance (PKD's Eq. 3, the CKD
    authors' released code); the two differ by the factor d.
    ``normalize="l2"`` first scales every vector to unit length (as PKD does).
    """
    if reduction not in MSE_REDUCTIONS:
        raise ValueError(f"masked_mse: reduction '{reduction}'; valid: {', '.join(MSE_REDUCTIONS)}")
    s, t = student.float(), teacher.float()
    if normalize == "l2":
        s, t = F.normalize(s, dim=-1), F.normalize(t, dim=-1)
    squared = (s - t).pow(2)
    per_position = squared.sum(dim=-1) if reduction == "sum" else squared.mean(dim=-1)  # L x B
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


def align_attention(student_maps: Sequence[Tensor], weight: Tensor, bias: Tensor) -> Tensor:
    """A2D's Attention Alignment Module: a pointwise (1 x 1) convolution over the stacked
    student maps, channel = layer·H + head.

    ``student_maps``: L_s tensors B x H_s x T x S; ``weight``: C_t x (L_s·H_s); ``bias``: C_t.
    Returns B x C_t x T x S in fp32. Summed layer by layer, so the student maps are never
    stacked into a copy.
    """
    heads = student_maps[0].size(1)
    weight, out = weight.float(), None
    for layer, maps in enumerate(student_maps):
        term = torch.einsum("oh,bhts->bots", weight[:, layer * heads:(layer + 1) * heads], maps.float())
        out = term if out is None else out.add_(term)
    return out.add_(bias.float().view(1, -1, 1, 1))


def attention_kl(
    teacher_maps: Sequence[Tensor],
    aligned: Tensor,
    key_mask: Tensor,
    query_mask: Tensor,
    normalize: str = "renorm",
    mode: str = "rowwise",
    eps: float = 1e-6,
) -> Tensor:
    """Σ KL(teacher ‖ aligned student) over maps and batch: A2D's attention loss for one type,
    summed (the term chooses the reduction, see :mod:`fairseq_distill.terms.attention`).

    ``teacher_maps``: L_t tensors B x H_t x T x S (probabilities); ``aligned``: the AAM output,
    B x (L_t·H_t) x T x S. ``key_mask``: broadcastable to B x 1 x T x S, True at keys a query may
    attend to (not padding; for decoder self-attention also not in the future);
    ``query_mask``: B x T, True at real query rows.

    ``mode="flat"``: the released code's KL (one softmax over each flattened map, on both
    sides) restricted to the sentence's real cells (real query rows, allowed keys), each
    map's KL times the square of the sentence's mean number of allowed keys per query row,
    summed over maps and batch: see :func:`flat_attention_kl`.

    ``mode="rowwise"``: every real query row of ``aligned`` becomes a distribution over the
    allowed keys (``normalize="renorm"``: values clamped to ``eps`` and divided by their sum;
    ``"softmax"``: softmax of the values), and the KL of each real row is summed.
    ``mode="reference"`` follows the authors' released code: one softmax over each whole
    flattened T x S map, applied to the teacher's probabilities as well, no masking; the KL
    of each map is summed.
    """
    if mode == "flat":
        return flat_attention_kl(teacher_maps, aligned, key_mask, query_mask).sum()
    heads = teacher_maps[0].size(1)
    total = aligned.new_zeros(())
    for layer, p in enumerate(teacher_maps):
        logits = aligned[:, layer * heads:(layer + 1) * heads]
        p = p.float()
        if mode == "reference":
            log_p = F.log_softmax(p.flatten(2), dim=-1)
            log_q = F.log_softmax(logits.flatten(2), dim=-1)
            total = total + (log_p.exp() * (log_p - log_q)).sum()
            continue
        if normalize == "softmax":
            log_q = F.log_softmax(logits.masked_fill(~key_mask, float("-inf")), dim=-1)
        else:
            q = logits.clamp(min=eps).masked_fill(~key_mask, 0.0)
            # clamped so that masked keys (q = 0) pass no 0·∞ = NaN gradient back
            log_q = (q / q.sum(dim=-1, keepdim=True)).clamp(min=1e-30).log()
        # p·(log p − log q) where the teacher puts mass on an allowed key; 0·log 0 = 0 elsewhere
        keep = (p > 0) & key_mask
        pointwise = torch.where(keep, p * (p.clamp(min=1e-30).log() - log_q), torch.zeros_like(p))
        per_row = pointwise.sum(dim=-1)  # B x H x T
        total = total + per_row.masked_fill(~query_mask.unsqueeze(1), 0.0).sum()
    return total


def flat_attention_kl(teacher_maps: Sequence[Tensor], aligned: Tensor, key_mask: Tensor,
                      query_mask: Tensor) -> Tensor:
    """Per sentence and map, ``n² · KL(softmax(p) ‖ softmax(a))`` over the map's real cells.

    ``p`` is a teacher map's probabilities and ``a`` the aligned student values, each flattened
    over the cells where ``query_mask`` and ``key_mask`` are both True (one softmax per map, as
    in the A2D authors' code, which takes it over the whole padded T x S map); ``n`` is the
    sentence's mean number of allowed keys per real query row. Shapes as in
    :func:`attention_kl`; returns B x (L_t·H_t).

    Why n²: attention probabilities are about 1/n, so as softmax inputs they differ from
    uniform by O(1/n), and the KL of two such softmaxes is about half the variance of their
    difference over the cells, O(1/n²). Scaled by n², a map's loss (and its gradient relative
    to the per-token cross-entropy) no longer shrinks with sentence length
    (docs/methods/a2d.md, "The loss's scale").
    """
    heads = teacher_maps[0].size(1)
    cells = (key_mask & query_mask[:, None, :, None]).expand(-1, 1, -1, -1)  # B x 1 x T x S
    rows = query_mask.sum(-1).clamp(min=1)
    n = cells.flatten(1).sum(-1) / rows  # B: mean allowed keys per real query row
    flat_cells = cells.flatten(2)  # B x 1 x T·S
    out = []
    for layer, p in enumerate(teacher_maps):
        logits = aligned[:, layer * heads:(layer + 1) * heads].flatten(2)
        log_p = F.log_softmax(p.float().flatten(2).masked_fill(~flat_cells, float("-inf")), dim=-1)
        log_q = F.log_softmax(logits.masked_fill(~flat_cells, float("-inf")), dim=-1)
        # exp(log p)·(log p − log q) on real cells only: masked cells would give 0·(−∞ + ∞)
        pointwise = torch.where(flat_cells, log_p.exp() * (log_p - log_q), torch.zeros_like(log_q))
        out.append(pointwise.sum(-1))  # B x H
    return torch.cat(out, dim=1) * (n * n).unsqueeze(1)
