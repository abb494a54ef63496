"""``--criterion a2d``: Align-to-Distill (Jin et al., LREC-COLING 2024).

Every student attention head learns from every teacher head, across layers, through a
trainable Attention Alignment Module (AAM) per attention type: a pointwise convolution
from the L_s·H_s stacked student maps to the L_t·H_t teacher maps (channel = layer·H +
head), so any depths and head counts pair up without a layer map.

    loss = (1 − α)·CE_ls + α·word-KD + β·decay^(epoch − 1)·(L_enc + (L_dec_self + L_dec_cross)/2)

Each L is :func:`~fairseq_distill.losses.attention_kl` of the teacher maps against the AAM
output (row-wise over allowed keys by default, or the released code's flattened-map form
with ``--a2d-kl-mode reference``). The halving applies when both decoder terms are on.
The epoch is fairseq's own (``task.begin_epoch``), so a resumed run continues the schedule.
The AAMs are criterion parameters: optimised, checkpointed and restored with the run,
absent from exported decoding checkpoints. Only the chosen attention types are captured
and get an AAM.
"""
import logging
import math
from dataclasses import dataclass, field
from typing import List

import torch
import torch.nn as nn
from fairseq import metrics
from fairseq.criterions import register_criterion
from fairseq.dataclass import ChoiceEnum

from fairseq_distill.criterions.word_kd import WordKDConfig, WordKDCriterion, check_fraction
from fairseq_distill.errors import DistillError
from fairseq_distill.features import ATTENTION_TYPES, FeatureRequest, Features, stack_shape
from fairseq_distill.losses import align_attention, attention_kl

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


@dataclass
class A2DConfig(WordKDConfig):
    label_smoothing: float = field(default=0.1, metadata={"help": "epsilon for label smoothing"})
    kd_weight: float = field(default=0.5, metadata={"help": "α, weight of word-level KD (CE gets 1 − α)"})
    a2d_weight: float = field(default=1.0, metadata={"help": "β, weight of the attention loss"})
    a2d_decay: float = field(
        default=0.9, metadata={"help": "the attention weight is β·decay^(epoch − 1)"}
    )
    a2d_attention_types: str = field(
        default="all",
        metadata={"help": "all, encoder, decoder, or a comma list of encoder_self, decoder_self, "
                  "decoder_cross"},
    )
    a2d_normalize: ChoiceEnum(["softmax", "renorm"]) = field(
        default="softmax",
        metadata={"help": "how the AAM output becomes a distribution over keys (row-wise mode)"},
    )
    a2d_kl_mode: ChoiceEnum(["rowwise", "reference"]) = field(
        default="rowwise",
        metadata={"help": "rowwise: masked KL per query row; reference: the released code's "
                  "softmax over each whole flattened map, unmasked"},
    )


@register_criterion("a2d", dataclass=A2DConfig)
class A2DCriterion(WordKDCriterion):
    def __init__(self, task, cfg):
        super().__init__(task, cfg.sentence_avg, cfg.label_smoothing, cfg.ignore_prefix_size,
                         cfg.report_accuracy, cfg.kd_weight, cfg.kd_temperature)
        if cfg.a2d_weight < 0:
            raise DistillError(f"--a2d-weight must be >= 0, got {cfg.a2d_weight}")
        check_fraction("--a2d-decay", cfg.a2d_decay)
        self.a2d_weight, self.a2d_decay = cfg.a2d_weight, cfg.a2d_decay
        self.normalize, self.kl_mode = str(cfg.a2d_normalize), str(cfg.a2d_kl_mode)
        self.types = parse_attention_types(cfg.a2d_attention_types)

        teacher = task.load_teacher(criterion_name="a2d")
        if len(teacher) != 1:
            raise DistillError(f"a2d aligns the attention heads of one teacher; --teacher-path names "
                               f"{len(teacher)}")
        if task.student_shape is None:
            raise DistillError("a2d needs a Transformer student with attention layers")
        teacher_shape = stack_shape(teacher.models[0])
        aams = {}
        for kind in self.types:
            if kind not in task.student_shape or kind not in teacher_shape:
                who = "student" if kind not in task.student_shape else "teacher"
                raise DistillError(f"a2d: the {who} has no {kind} attention")
            aams[kind] = AttentionAlignment(task.student_shape[kind], teacher_shape[kind])
            (ls, hs), (lt, ht) = task.student_shape[kind], teacher_shape[kind]
            logger.info(f"a2d {kind}: AAM {ls}x{hs} student heads -> {lt}x{ht} teacher heads")
        self.aams = nn.ModuleDict(aams)

    @classmethod
    def build_criterion(cls, cfg, task):
        return cls(task, cfg)

    def feature_request(self) -> FeatureRequest:
        return FeatureRequest(attention=frozenset(self.types))

    def attention_weight(self) -> float:
        """β·decay^(epoch − 1), from fairseq's epoch counter."""
        return self.a2d_weight * self.a2d_decay ** (getattr(self.task, "epoch", 1) - 1)

    def ce_weight(self, terms) -> float:
        # CE and word KD share 1; the attention term comes on top
        return 1.0 - self.kd_weight if terms else 1.0

    def masks(self, kind: str, sample):
        """(key mask broadcastable to B x 1 x T x S, query mask B x T) of one attention type."""
        net_input = sample["net_input"]
        src_real = net_input["src_tokens"].ne(self.task.source_dictionary.pad())
        tgt_real = net_input["prev_output_tokens"].ne(self.padding_idx)
        if kind == "encoder_self":
            return src_real[:, None, None, :], src_real
        if kind == "decoder_cross":
            return src_real[:, None, None, :], tgt_real
        length = tgt_real.size(1)
        causal = torch.ones(length, length, dtype=torch.bool, device=tgt_real.device).tril()
        return tgt_real[:, None, None, :] & causal[None, None], tgt_real

    def attention_losses(self, student: Features, teacher: Features, sample) -> dict:
        losses = {}
        for kind in self.types:
            key_mask, query_mask = self.masks(kind, sample)
            aligned = self.aams[kind](student.attention[kind])
            losses[kind] = attention_kl(teacher.attention[kind], aligned, key_mask, query_mask,
                                        self.normalize, self.kl_mode)
        return losses

    def distillation_terms(self, student: Features, teachers: List[Features], sample):
        terms = super().distillation_terms(student, teachers, sample)
        weight = self.attention_weight()
        if weight > 0:
            losses = self.attention_losses(student, teachers[0], sample)
            decoder = [losses[k] for k in ("decoder_self", "decoder_cross") if k in losses]
            total = losses.get("encoder_self", 0.0)
            if decoder:
                total = total + sum(decoder) / len(decoder)
            terms["attn_loss"] = (weight, total)
        return terms

    def forward(self, model, sample, reduce=True):
        loss, sample_size, logging_output = super().forward(model, sample, reduce)
        if model.training:  # the schedule's current weight, averaged exactly in reduce_metrics
            logging_output["attn_weight"] = self.attention_weight() * sample_size
        return loss, sample_size, logging_output

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        super().reduce_metrics(logging_outputs)
        if any("attn_weight" in log for log in logging_outputs):
            sample_size = sum(log.get("sample_size", 0) for log in logging_outputs)
            total = sum(log.get("attn_weight", 0) for log in logging_outputs)
            metrics.log_scalar("attn_weight", total / max(sample_size, 1), sample_size, round=4)
