"""Attention KD: Align-to-Distill (Jin et al., LREC-COLING 2024).

Every student attention head learns from every teacher head, across layers, through a
trainable Attention Alignment Module (AAM) per attention type: a pointwise convolution
from the L_s·H_s stacked student maps to the L_t·H_t teacher maps (channel = layer·H +
head), so any depths and head counts pair up without a layer map.

    L_attn = L_enc + (L_dec_self + L_dec_cross)/2,   weight β·decay^(epoch − 1)

The halving applies when both decoder types are on; the weight comes on top of CE and
word-level KD, as in the paper. Only the chosen attention types are captured and get an AAM.
Two forms of each L (``--a2d-kl-mode``):

* ``rowwise`` (default; the paper as we read it, its Eqs. 9–12 being lost in our copy): every
  real query row of an aligned map is made a distribution over the keys it may attend to
  (``--a2d-normalize renorm``: the AAM's values, a weighted sum of probabilities, clamped
  to be positive and divided by their sum; ``softmax`` is a variant whose rows keep a floor
  of about log(#keys) − H(teacher row) that no alignment removes), and
  ``L = Σ_maps mean_(real query rows) KL(teacher row ‖ aligned row)``. Summing over the
  L_t·H_t maps is why the paper lowers β for a teacher with more maps. L_attn is per
  target token like the cross-entropy: the term returns it times ``sample_size``.
* ``reference``: the authors' released code, reductions included: one softmax over each
  whole flattened T x S map (applied to the teacher's probabilities too), no masking, KL
  summed over batch, maps and cells, next to a cross-entropy averaged over the B·T target
  positions. The term returns that sum times B·T, so that relative to the cross-entropy
  (which the criterion sums) its gradient has the released code's scale.

The decay is per epoch (the paper), or with ``--a2d-decay-updates N`` continuous per
update, ``β·decay^(updates/N)``, for runs much shorter than the paper's.
"""
import logging
import math
from dataclasses import dataclass, field
from typing import List, Optional, Sequence

import torch
import torch.nn as nn
from fairseq.dataclass import ChoiceEnum
from torch import Tensor

from fairseq_distill.errors import DistillError
from fairseq_distill.features import ATTENTION_TYPES, FeatureRequest, Features
from fairseq_distill.losses import align_attention, attention_kl
from fairseq_distill.terms.base import DistillationTerm, TermContext, batch_sample_size, check_fraction
from fairseq_distill.terms.registry import register_term

logger = logging.getLogger(__name__)

TYPE_ALIASES = {
    "all": ATTENTION_TYPES,
    "encoder": ("encoder_self",),
    "decoder": ("decoder_self", "decoder_cross"),
}


def parse_attention_types(spec: str) -> tuple:
    """'all', 'encoder', 'decoder' or a comma list of encoder_self, decoder_self, decoder_cross."""
    chosen = []
    for part in (p.strip() for p in spec.split(",") if p.strip()):
        names = TYPE_ALIASES.get(part, (part,))
        for name in names:
            if name not in ATTENTION_TYPES:
                raise DistillError(f"--a2d-attention-types: unknown type '{part}'; use all, encoder, "
                                   f"decoder or a comma list of {', '.join(ATTENTION_TYPES)}")
            if name not in chosen:
                chosen.append(name)
    if not chosen:
        raise DistillError(f"--a2d-attention-types '{spec}' chooses no attention type")
    return tuple(t for t in ATTENTION_TYPES if t in chosen)


class AttentionAlignment(nn.Module):
    """The AAM of one attention type: student (layers, heads) -> teacher (layers, heads)."""

    def __init__(self, student_layout, teacher_layout):
        super().__init__()
        c_in, c_out = student_layout[0] * student_layout[1], teacher_layout[0] * teacher_layout[1]
        self.weight = nn.Parameter(torch.empty(c_out, c_in))
        self.bias = nn.Parameter(torch.empty(c_out))
        # the layouts travel with the weights, for analysis of a saved criterion state
        self.register_buffer("student_layout", torch.tensor(student_layout))
        self.register_buffer("teacher_layout", torch.tensor(teacher_layout))
        # the initialisation of nn.Conv2d(c_in, c_out, kernel_size=1)
        bound = 1.0 / math.sqrt(c_in)
        nn.init.uniform_(self.weight, -bound, bound)
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, student_maps: List[torch.Tensor]) -> torch.Tensor:
        return align_attention(student_maps, self.weight, self.bias)


# β and the KL's form, and where each comes from. The paper's own β is 1.0 for a 6-layer teacher
# and 0.1 for a 12-layer one; at our benchmark's budget it cost far more than it gave
# (bench/results/a2d.md), so the default is the best of that sweep. The KL is our reading of the
# paper's prose (its equations are lost in our copy). --a2d-released: the authors' training
# script and code (β = 1, their reductions); α = 0.5 and decay 0.9 come from the same script and
# are the a2d criterion's defaults either way.
DEFAULTS = {"weight": 0.01, "kl_mode": "rowwise"}
RELEASED = {"weight": 1.0, "kl_mode": "reference"}


@dataclass
class AttentionKDOptions:
    # The paper's β (1.0 for a 6-layer teacher, 0.1 for a 12-layer one) cost a 2-layer student
    # far more than it gave at a 10-epoch budget (bench/results/a2d.md); of the swept values
    # 0.01 did best, so it is the default and the paper's setting is one flag away.
    a2d_weight: Optional[float] = field(
        default=None,
        metadata={"help": "β, weight of the attention loss (the paper: 1.0 for a 6-layer teacher, "
                  "0.1 for a 12-layer one). Default: 0.01, the best of a sweep at a short budget; "
                  "1.0 with --a2d-released"},
    )
    a2d_released: bool = field(
        default=False,
        metadata={"help": "the authors' released code in one switch: --a2d-kl-mode reference and β = 1 "
                  "(with the a2d criterion's α = 0.5 and decay 0.9, as in their training script); "
                  "options given explicitly win"},
    )
    a2d_decay: float = field(
        default=0.9, metadata={"help": "the attention weight is β·decay^(epoch − 1)"}
    )
    a2d_attention_types: str = field(
        default="all",
        metadata={"help": "all, encoder, decoder, or a comma list of encoder_self, decoder_self, "
                  "decoder_cross"},
    )
    a2d_normalize: ChoiceEnum(["renorm", "softmax"]) = field(
        default="renorm",
        metadata={"help": "rowwise mode: how an aligned row becomes a distribution over its keys: "
                  "renorm (values clamped positive, divided by their sum) or softmax (a variant "
                  "with a floor no alignment removes)"},
    )
    a2d_kl_mode: Optional[ChoiceEnum(["rowwise", "reference"])] = field(
        default=None,
        metadata={"help": "rowwise (default): Σ over maps of the mean KL over real query rows, per "
                  "target token (our reading of the paper's prose; its Eqs. 9-12 are lost in our "
                  "copy); reference (the default with --a2d-released): the authors' released code "
                  "with its reductions (softmax over each flattened map, unmasked, KL summed over "
                  "batch, maps and cells beside a per-position CE)"},
    )
    a2d_decay_updates: int = field(
        default=0,
        metadata={"help": "0: the weight decays once per epoch, β·decay^(epoch − 1) (the paper); "
                  "N > 0: continuously, β·decay^(updates/N), e.g. to fit the paper's decay into "
                  "a shorter run"},
    )


@register_term("a2d", options=(AttentionKDOptions,), legacy_name="attn")
class AttentionKDTerm(DistillationTerm):
    shares_ce_budget = False
    scheduled = True

    def __init__(self, weight: float, decay: float, context: TermContext, attention_types: str = "all",
                 normalize: str = "renorm", kl_mode: str = "rowwise", decay_updates: int = 0):
        if weight < 0:
            raise DistillError(f"--a2d-weight must be >= 0, got {weight}")
        check_fraction("--a2d-decay", decay)
        if decay_updates < 0:
            raise DistillError(f"--a2d-decay-updates must be >= 0 (0: decay once per epoch), got {decay_updates}")
        if kl_mode not in ("rowwise", "reference"):
            raise DistillError(f"--a2d-kl-mode must be rowwise or reference, got {kl_mode}")
        super().__init__(weight)
        self.decay, self.decay_updates = decay, decay_updates
        self.normalize, self.kl_mode = normalize, kl_mode
        self.sentence_avg = context.sentence_avg
        self.types = parse_attention_types(attention_types)
        self.source_pad, self.target_pad = context.source_pad, context.target_pad
        context.single_teacher("a2d")
        student_shape, teacher_shape = context.student_layout("a2d"), context.teacher_layout("a2d")
        aams = {}
        for kind in self.types:
            if kind not in student_shape or kind not in teacher_shape:
                who = "student" if kind not in student_shape else "teacher"
                raise DistillError(f"a2d: the {who} has no {kind} attention")
            aams[kind] = AttentionAlignment(student_shape[kind], teacher_shape[kind])
            (ls, hs), (lt, ht) = student_shape[kind], teacher_shape[kind]
            logger.info(f"a2d {kind}: AAM {ls}x{hs} student heads -> {lt}x{ht} teacher heads")
        self.aams = nn.ModuleDict(aams)

    @classmethod
    def from_config(cls, cfg, context: TermContext, names: Sequence[str] = ()) -> "AttentionKDTerm":
        # absent from the stored options of checkpoints written before --a2d-released
        released = getattr(cfg, "a2d_released", False)
        defaults = RELEASED if released else DEFAULTS
        weight = cfg.a2d_weight if cfg.a2d_weight is not None else defaults["weight"]
        kl_mode = str(cfg.a2d_kl_mode) if cfg.a2d_kl_mode else defaults["kl_mode"]
        return cls(weight, cfg.a2d_decay, context, cfg.a2d_attention_types, str(cfg.a2d_normalize), kl_mode,
                   cfg.a2d_decay_updates)

    @property
    def request(self) -> FeatureRequest:
        return FeatureRequest(attention=frozenset(self.types))

    def current_weight(self) -> float:
        """β·decay^(epoch − 1) from fairseq's epoch counter, or β·decay^(updates/N)."""
        if self.decay_updates:
            return self.weight * self.decay ** (self.num_updates / self.decay_updates)
        return self.weight * self.decay ** (self.epoch - 1)

    def masks(self, kind: str, sample):
        """(key mask broadcastable to B x 1 x T x S, query mask B x T) of one attention type."""
        net_input = sample["net_input"]
        src_real = net_input["src_tokens"].ne(self.source_pad)
        tgt_real = net_input["prev_output_tokens"].ne(self.target_pad)
        if kind == "encoder_self":
            return src_real[:, None, None, :], src_real
        if kind == "decoder_cross":
            return src_real[:, None, None, :], tgt_real
        length = tgt_real.size(1)
        causal = torch.ones(length, length, dtype=torch.bool, device=tgt_real.device).tril()
        return tgt_real[:, None, None, :] & causal[None, None], tgt_real

    def losses_by_type(self, student: Features, teacher: Features, sample) -> dict:
        """Each type's L: Σ_maps mean_rows KL (rowwise), or Σ_(batch, maps, cells) KL (reference)."""
        losses = {}
        for kind in self.types:
            key_mask, query_mask = self.masks(kind, sample)
            aligned = self.aams[kind](student.attention[kind])
            summed = attention_kl(teacher.attention[kind], aligned, key_mask, query_mask,
                                  self.normalize, self.kl_mode)
            if self.kl_mode == "rowwise":
                summed = summed / query_mask.sum().clamp(min=1)
            losses[kind] = summed
        return losses

    def batch_scale(self, sample) -> int:
        """What L_attn is multiplied by to sit beside the criterion's summed cross-entropy."""
        if self.kl_mode == "reference":
            return sample["target"].numel()  # the released code averages CE over all B·T positions
        return batch_sample_size(sample, self.sentence_avg)

    def forward(self, student: Features, teachers: List[Features], sample) -> Tensor:
        losses = self.losses_by_type(student, teachers[0], sample)
        decoder = [losses[k] for k in ("decoder_self", "decoder_cross") if k in losses]
        total = losses.get("encoder_self", 0.0)
        if decoder:
            total = total + sum(decoder) / len(decoder)
        return total * self.batch_scale(sample)
