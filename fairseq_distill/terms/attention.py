"""Attention KD: Align-to-Distill (Jin et al., LREC-COLING 2024).

Every student attention head learns from every teacher head, across layers, through a
trainable Attention Alignment Module (AAM) per attention type: a pointwise convolution
from the L_s·H_s stacked student maps to the L_t·H_t teacher maps (channel = layer·H +
head), so any depths and head counts pair up without a layer map.

    L_attn = L_enc + (L_dec_self + L_dec_cross)/2,   weight β·decay^(e − 1)

The halving applies when both decoder types are on; the weight comes on top of CE and
word-level KD, as in the paper. Only the chosen attention types are captured and get an AAM.
Three forms of each L (``--a2d-kl-mode``):

* ``flat`` (default): the authors' KL, one softmax over each flattened map on both sides
  (so every cell has a gradient), taken over the sentence's real cells, times n² (n: the
  sentence's mean number of keys per query row), averaged over sentences and maps, times
  ``FLAT_SCALE``. Its ratio to the per-token cross-entropy no longer grows with sentences per
  batch and maps per type, nor shrinks with sentence length (:func:`~fairseq_distill.losses.flat_attention_kl`);
  ``FLAT_SCALE`` makes β = 1 pull as hard as the released code at β = 1 in the authors' own
  setting. The term returns L_attn times ``sample_size`` (per target token, like the CE).
* ``reference`` (``--a2d-released``): the authors' released code, reductions included: one
  softmax over each whole flattened T x S map (applied to the teacher's probabilities too), no
  masking, KL summed over batch, maps and cells, next to a cross-entropy averaged over the B·T
  target positions. The term returns that sum times B·T, so that relative to the
  cross-entropy (which the criterion sums) its gradient has the released code's scale, which
  grows with the batch's sentences and the teacher's maps.
* ``rowwise``: our reading of the paper's prose (its Eqs. 9–12 are lost in our copy): every
  real query row of an aligned map is made a distribution over the keys it may attend to
  (``--a2d-normalize renorm``: the AAM's values clamped to be positive and divided by their
  sum, so cells below the clamp get no gradient; ``softmax`` is a variant whose rows keep a
  floor of about log(#keys) − H(teacher row) that no alignment removes), and
  ``L = Σ_maps mean_(real query rows) KL(teacher row ‖ aligned row)``, per target token.

The decay (``--a2d-decay-schedule``): ``run`` (default) steps e from 1 to the authors' 100
epochs over this run's length, so the weight falls over the run as much as over theirs;
``epoch`` is the paper's β·decay^(epoch − 1), which assumes runs of that length; with
``--a2d-decay-updates N`` it is continuous, ``β·decay^(updates/N)``.
"""
import logging
import math
from dataclasses import dataclass, field
from typing import List, Optional, Sequence

import torch
import torch.nn as nn
from fairseq.dataclass import ChoiceEnum
from omegaconf import II
from torch import Tensor

from fairseq_distill.errors import DistillError
from fairseq_distill.features import ATTENTION_TYPES, FeatureRequest, Features
from fairseq_distill.losses import align_attention, attention_kl
from fairseq_distill.terms.a2d_schedule import DecaySchedule
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


# The defaults (issue 48). The KL is the authors' released one (a softmax over each flattened
# map), which has no dead cells, with a reduction whose strength does not depend on the batch's
# shape (``flat``); FLAT_SCALE makes β = 1 as strong, relative to the cross-entropy, as the
# released code at β = 1 in the authors' own setting (bench/a2d_gradient_share.py measures it).
# The weight decays by 0.9 per epoch of a run as long as the authors' (``run``), i.e. as much
# over the run as their 100-epoch runs decay. --a2d-released: their code exactly (reductions,
# β = 1, per-epoch decay); rowwise is our reading of the paper's prose, whose own weight is the
# small β it tied word-level KD with. α = 0.5 and decay 0.9 come from the authors' script.
DEFAULTS = {"kl_mode": "flat", "decay_schedule": "run"}
RELEASED = {"weight": 1.0, "kl_mode": "reference", "decay_schedule": "epoch"}
DEFAULT_WEIGHT = {"flat": 1.0, "reference": 1.0, "rowwise": 0.01}
KL_MODES = ("flat", "reference", "rowwise")
DECAY_SCHEDULES = ("run", "epoch")
# the ratio of the released reduction's gradient share to the flat one's at FLAT_SCALE = 1, in
# the authors' setting (IWSLT-shaped batches, 3+3 and 6+6 at d = 512): bench/a2d_gradient_share.py
FLAT_SCALE = 6.7


@dataclass
class AttentionKDOptions:
    a2d_weight: Optional[float] = field(
        default=None,
        metadata={"help": "β, weight of the attention loss. Default: 1.0 for --a2d-kl-mode flat "
                  "(calibrated to the authors' strength at their β = 1) and reference (the "
                  "paper's β for a 6-layer teacher), 0.01 for rowwise"},
    )
    a2d_released: bool = field(
        default=False,
        metadata={"help": "the authors' released code in one switch: --a2d-kl-mode reference, β = 1 "
                  "and --a2d-decay-schedule epoch (with the a2d criterion's α = 0.5 and decay 0.9, "
                  "as in their training script); options given explicitly win"},
    )
    a2d_decay: float = field(
        default=0.9, metadata={"help": "the attention weight falls by this factor per epoch (of the "
                               "authors' run length with --a2d-decay-schedule run)"}
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
    a2d_kl_mode: Optional[ChoiceEnum(list(KL_MODES))] = field(
        default=None,
        metadata={"help": "flat (default): the authors' KL (a softmax over each flattened map) on "
                  "real cells, averaged over sentences and maps and scaled so that its strength "
                  "does not depend on batch size, sentence length or head count; reference (the "
                  "default with --a2d-released): the released code with its reductions (unmasked, "
                  "KL summed over batch, maps and cells beside a per-position CE, so its strength "
                  "grows with the batch); rowwise: our reading of the paper's prose (per query "
                  "row, clamped and renormalised)"},
    )
    a2d_decay_schedule: Optional[ChoiceEnum(list(DECAY_SCHEDULES))] = field(
        default=None,
        metadata={"help": "run (default): β·decay^(e − 1) where e runs from 1 to the authors' 100 "
                  "epochs over this run's --max-update (per update) or --max-epoch (per epoch); "
                  "epoch (the paper, and --a2d-released): β·decay^(epoch − 1)"},
    )
    a2d_decay_updates: int = field(
        default=0,
        metadata={"help": "N > 0: decay continuously, β·decay^(updates/N), whatever the schedule"},
    )
    # the run's length, for --a2d-decay-schedule run (no command-line option of their own)
    max_epoch: int = II("optimization.max_epoch")
    max_update: int = II("optimization.max_update")


def run_length(cfg, name: str) -> int:
    """--max-epoch or --max-update as the criterion's options carry them (0 when absent, as in
    the stored options of older checkpoints)."""
    try:
        return int(getattr(cfg, name, 0) or 0)
    except (TypeError, ValueError):  # an interpolation left unresolved outside fairseq-train
        return 0


@register_term("a2d", options=(AttentionKDOptions,), legacy_name="attn")
class AttentionKDTerm(DistillationTerm):
    shares_ce_budget = False
    scheduled = True

    def __init__(self, weight: float, decay: float, context: TermContext, attention_types: str = "all",
                 normalize: str = "renorm", kl_mode: str = "flat", decay_updates: int = 0,
                 decay_schedule: str = "epoch", max_epoch: int = 0, max_update: int = 0):
        if weight < 0:
            raise DistillError(f"--a2d-weight must be >= 0, got {weight}")
        check_fraction("--a2d-decay", decay)
        if decay_updates < 0:
            raise DistillError(f"--a2d-decay-updates must be >= 0 (0: decay once per epoch), got {decay_updates}")
        if kl_mode not in KL_MODES:
            raise DistillError(f"--a2d-kl-mode must be one of {', '.join(KL_MODES)}, got {kl_mode}")
        if decay_schedule not in DECAY_SCHEDULES:
            raise DistillError(f"--a2d-decay-schedule must be one of {', '.join(DECAY_SCHEDULES)}, "
                               f"got {decay_schedule}")
        if decay_schedule == "run" and not decay_updates and not (max_update or max_epoch):
            # an open-ended run (early stopping alone) is what the paper's per-epoch decay assumed
            logger.warning("a2d: the run has no --max-update or --max-epoch, so the attention weight "
                           "decays per epoch as in the paper (--a2d-decay-schedule epoch); give the "
                           "run's length to spread the authors' 100-epoch decay over it")
            decay_schedule = "epoch"
        super().__init__(weight)
        self.decay, self.decay_updates = decay, decay_updates
        self.decay_schedule, self.max_epoch, self.max_update = decay_schedule, max_epoch or 0, max_update or 0
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
        logger.info(f"a2d: β = {weight}, {kl_mode} KL, {self.schedule.describe()}; {self.schedule.course()}")
        warning = self.schedule.short_run_warning()
        if warning:
            logger.warning(warning)
        # an epoch-bounded run's length is known once its first epoch has shown its updates
        self.length_checked = bool(warning) or not self.max_epoch

    @classmethod
    def from_config(cls, cfg, context: TermContext, names: Sequence[str] = ()) -> "AttentionKDTerm":
        # absent from the stored options of checkpoints written before they existed, which
        # trained rowwise at β = 0.01 decayed per epoch unless told otherwise
        released = getattr(cfg, "a2d_released", False)
        stored = {} if hasattr(cfg, "a2d_decay_schedule") else {"kl_mode": "rowwise", "decay_schedule": "epoch"}
        defaults = dict(DEFAULTS, **stored, **(RELEASED if released else {}))
        kl_mode = str(cfg.a2d_kl_mode) if cfg.a2d_kl_mode else defaults["kl_mode"]
        weight = cfg.a2d_weight
        if weight is None:
            weight = defaults.get("weight", DEFAULT_WEIGHT[kl_mode])
        schedule = getattr(cfg, "a2d_decay_schedule", None)
        schedule = str(schedule) if schedule else defaults["decay_schedule"]
        return cls(weight, cfg.a2d_decay, context, cfg.a2d_attention_types, str(cfg.a2d_normalize), kl_mode,
                   cfg.a2d_decay_updates, schedule, run_length(cfg, "max_epoch"), run_length(cfg, "max_update"))

    def loss_form(self) -> dict:
        # the alignment modules' outputs are softmax logits (flat, reference) or clamped
        # probabilities (rowwise renorm): another form would read them differently
        form = {"--a2d-kl-mode": self.kl_mode}
        if self.kl_mode == "rowwise":
            form["--a2d-normalize"] = self.normalize
        return form

    @property
    def request(self) -> FeatureRequest:
        return FeatureRequest(attention=frozenset(self.types))

    @property
    def schedule(self) -> DecaySchedule:
        return DecaySchedule(self.weight, self.decay, self.decay_schedule, self.decay_updates, self.max_epoch,
                             self.max_update)

    def current_weight(self) -> float:
        """β·decay^(epoch − 1) from fairseq's epoch counter, β·decay^(updates/N), or with the
        ``run`` schedule the authors' epochs 1..100 spread over this run's length."""
        return self.schedule.at(self.epoch, self.num_updates)

    def begin_epoch(self, epoch: int):
        super().begin_epoch(epoch)
        if not self.length_checked and epoch > 1 and self.num_updates > 0:
            self.length_checked = True
            warning = self.schedule.short_run_warning(self.num_updates / (epoch - 1))
            if warning:
                logger.warning(warning)

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
        """Each type's L: FLAT_SCALE·mean over sentences and maps of n²·KL (flat), Σ_maps mean_rows
        KL (rowwise), or Σ_(batch, maps, cells) KL (reference)."""
        losses = {}
        for kind in self.types:
            key_mask, query_mask = self.masks(kind, sample)
            aligned = self.aams[kind](student.attention[kind])
            summed = attention_kl(teacher.attention[kind], aligned, key_mask, query_mask,
                                  self.normalize, self.kl_mode)
            if self.kl_mode == "rowwise":
                summed = summed / query_mask.sum().clamp(min=1)
            elif self.kl_mode == "flat":
                summed = summed * (FLAT_SCALE / (aligned.size(0) * aligned.size(1)))
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
