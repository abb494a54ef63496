"""Word-level KD: ``τ² · Σ_tokens KL(p_teacher^τ ‖ p_student^τ)`` (Hinton et al.; Kim and Rush).

With a teacher cache (``--teacher-cache``) the teacher's distribution is its stored top-k and
the KL is :func:`~fairseq_distill.losses.topk_word_kd_loss` (the K tokens plus one bucket for
the rest; the full KL when K is the vocabulary size); no teacher runs.
"""
from dataclasses import dataclass, field
from typing import List, Optional, Sequence

from torch import Tensor

from fairseq_distill.errors import DistillError
from fairseq_distill.features import Features
from fairseq_distill.losses import ensemble_log_probs, log_probs_at, topk_word_kd_loss, word_kd_loss
from fairseq_distill.terms.base import DistillationTerm, TermContext, check_fraction
from fairseq_distill.terms.registry import TERMS, register_term

# η alone: Kim and Rush's interpolation, half cross-entropy, half KD. A term whose paper pairs
# word-level KD with its own loss states its η as ``PAIRED_KD_WEIGHT`` (layer KD: CKD's 0.1).
WORD_KD_WEIGHT = 0.5


@dataclass
class WordKDOptions:
    kd_weight: Optional[float] = field(
        default=None,
        metadata={"help": f"η, weight of the word-level KD term (CE gets the rest). Default: "
                  f"{WORD_KD_WEIGHT}, or 0.1 beside a layer-KD term (as in the CKD paper)"},
    )
    kd_temperature: float = field(
        default=1.0, metadata={"help": "τ, softmax temperature of teacher and student in the KD term"}
    )


def default_kd_weight(names: Sequence[str]) -> float:
    """η when ``--kd-weight`` is not given: that of the terms it is combined with, if they state one."""
    paired = [TERMS[n].cls.PAIRED_KD_WEIGHT for n in names if getattr(TERMS[n].cls, "PAIRED_KD_WEIGHT", None)]
    return paired[0] if paired else WORD_KD_WEIGHT


@register_term("word_kd", options=(WordKDOptions,), legacy_name="kd")
class WordKDTerm(DistillationTerm):
    """KL from the teachers' averaged distribution to the student's, per target token."""

    def __init__(self, weight: float, temperature: float, context: TermContext):
        check_fraction("--kd-weight", weight)
        if temperature <= 0:
            raise DistillError(f"--kd-temperature must be positive, got {temperature}")
        super().__init__(weight)
        self.temperature = temperature
        self.prefix, self.padding_idx = context.ignore_prefix_size, context.target_pad
        self.cache = context.teacher_cache
        if self.cache is not None:
            self.cache.check_temperature(temperature)
            self.reads_teacher = False

    @classmethod
    def from_config(cls, cfg, context: TermContext, names: Sequence[str] = ("word_kd",)) -> "WordKDTerm":
        weight = cfg.kd_weight if cfg.kd_weight is not None else default_kd_weight(names)
        return cls(weight, cfg.kd_temperature, context)

    def forward(self, student: Features, teachers: List[Features], sample) -> Tensor:
        p, tau = self.prefix, self.temperature
        # at τ = 1 the KD term reuses the log-probabilities of the cross-entropy term
        if tau == 1.0 and student.log_probs is not None:
            student_log_probs = student.log_probs[:, p:]
        else:
            student_log_probs = log_probs_at(student.logits[:, p:], tau)
        non_pad = sample["target"].ne(self.padding_idx)
        if self.cache is not None:
            top_log_probs, top_indices = self.cache.lookup(sample["id"], non_pad)
            remainder = self.cache.meta.top_k < self.cache.meta.vocab_size
            return topk_word_kd_loss(student_log_probs, top_log_probs[:, p:], top_indices[:, p:],
                                     non_pad[:, p:], tau, remainder)
        teacher_log_probs = ensemble_log_probs([t.logits[:, p:] for t in teachers], tau)
        return word_kd_loss(student_log_probs, teacher_log_probs, non_pad[:, p:], tau)
