"""``--criterion word_kd``: label-smoothed cross-entropy plus word-level KD.

    loss = (1 − η)·CE_ls + η·τ²·Σ_tokens KL(p_teacher^τ ‖ p_student^τ)

This is also the base class of every distillation criterion in the plugin. A subclass
says which features it needs (:meth:`feature_request`) and adds its own weighted terms
(:meth:`distillation_terms`, calling ``super()`` to keep the word-level KD term); the
forward pass, the teacher call, the weighting and the logging live here once.

Validation runs neither the teacher nor any KD term: its ``loss``/``nll_loss`` are those
of plain label-smoothed cross-entropy, so checkpoints compare with non-KD training.
"""
import math
from dataclasses import dataclass, field
from typing import Dict, List, Tuple

import torch
from fairseq import metrics
from fairseq.criterions import register_criterion
from fairseq.criterions.label_smoothed_cross_entropy import (
    LabelSmoothedCrossEntropyCriterion,
    LabelSmoothedCrossEntropyCriterionConfig,
    label_smoothed_nll_loss,
)
from torch import Tensor

from fairseq_distill.errors import DistillError
from fairseq_distill.features import FeatureRequest, Features, run_with_features, unwrap_model
from fairseq_distill.losses import ensemble_log_probs, log_probs_at, word_kd_loss

# logged as separate metrics: every term a criterion adds must end with this suffix
TERM_SUFFIX = "_loss"
PLAIN_KEYS = ("loss", "nll_loss")


@dataclass
class WordKDConfig(LabelSmoothedCrossEntropyCriterionConfig):
    kd_weight: float = field(
        default=0.5, metadata={"help": "η, weight of the word-level KD term (CE gets the rest)"}
    )
    kd_temperature: float = field(
        default=1.0, metadata={"help": "τ, softmax temperature of teacher and student in the KD term"}
    )


def check_fraction(name: str, value: float):
    if not 0.0 <= value <= 1.0:
        raise DistillError(f"{name} must be between 0 and 1, got {value}")


@register_criterion("word_kd", dataclass=WordKDConfig)
class WordKDCriterion(LabelSmoothedCrossEntropyCriterion):
    needs_teacher = True

    def __init__(
        self,
        task,
        sentence_avg,
        label_smoothing,
        ignore_prefix_size=0,
        report_accuracy=False,
        kd_weight=0.5,
        kd_temperature=1.0,
    ):
        super().__init__(task, sentence_avg, label_smoothing, ignore_prefix_size, report_accuracy)
        if not hasattr(task, "load_teacher"):
            raise DistillError(
                f"criterion {type(self).__name__} needs --task translation_distill (with "
                f"--teacher-path); got task {type(task).__name__}"
            )
        check_fraction("--kd-weight", kd_weight)
        if kd_temperature <= 0:
            raise DistillError(f"--kd-temperature must be positive, got {kd_temperature}")
        self.kd_weight = kd_weight
        self.kd_temperature = kd_temperature

    # -- extension points -------------------------------------------------------------

    def feature_request(self) -> FeatureRequest:
        """Features beyond the logits that this criterion reads from student and teacher."""
        return FeatureRequest()

    def distillation_terms(
        self, student: Features, teachers: List[Features], sample
    ) -> Dict[str, Tuple[float, Tensor]]:
        """Weighted training terms, ``{name_loss: (weight, summed value)}``."""
        terms = {}
        if self.kd_weight > 0:
            terms["kd_loss"] = (self.kd_weight, self.word_kd_term(student, teachers, sample))
        return terms

    def ce_weight(self, terms: Dict[str, Tuple[float, Tensor]]) -> float:
        """Weight of the label-smoothed CE: what the distillation terms leave."""
        return 1.0 - sum(weight for weight, _ in terms.values())

    # -- shared machinery -------------------------------------------------------------

    def word_kd_term(self, student: Features, teachers: List[Features], sample) -> Tensor:
        p, tau = self.ignore_prefix_size, self.kd_temperature
        # at τ = 1 the KD term reuses the log-probabilities of the cross-entropy term
        if tau == 1.0 and student.log_probs is not None:
            student_log_probs = student.log_probs[:, p:]
        else:
            student_log_probs = log_probs_at(student.logits[:, p:], tau)
        teacher_log_probs = ensemble_log_probs([t.logits[:, p:] for t in teachers], tau)
        non_pad = sample["target"][:, p:].ne(self.padding_idx)
        return word_kd_loss(student_log_probs, teacher_log_probs, non_pad, tau)

    def label_smoothed_ce(self, model, student: Features, sample, reduce=True) -> Tuple[Tensor, Tensor]:
        """fairseq's ``compute_loss``, from the student's log-probabilities computed once per forward."""
        lprobs = student.log_probs
        target = model.get_targets(sample, student.net_output)
        if self.ignore_prefix_size > 0:
            lprobs, target = lprobs[:, self.ignore_prefix_size :], target[:, self.ignore_prefix_size :]
        return label_smoothed_nll_loss(
            lprobs.reshape(-1, lprobs.size(-1)), target.reshape(-1), self.eps,
            ignore_index=self.padding_idx, reduce=reduce,
        )

    def forward(self, model, sample, reduce=True):
        training = model.training
        request = self.feature_request() if training else FeatureRequest()
        student = run_with_features(model, sample["net_input"], request)
        # computed once: the CE term and (at τ = 1) the word-level KD term share them
        student.log_probs = model.get_normalized_probs(student.net_output, log_probs=True)
        ce_loss, nll_loss = self.label_smoothed_ce(model, student, sample, reduce=reduce)

        terms = {}
        if training:
            like = next(unwrap_model(model).parameters())
            teachers = self.task.load_teacher().features(sample["net_input"], request, like)
            terms = self.distillation_terms(student, teachers, sample)
        loss = self.ce_weight(terms) * ce_loss
        for weight, value in terms.values():
            loss = loss + weight * value

        sample_size = sample["target"].size(0) if self.sentence_avg else sample["ntokens"]
        logging_output = {
            "loss": loss.data,
            "nll_loss": nll_loss.data,
            "ntokens": sample["ntokens"],
            "nsentences": sample["target"].size(0),
            "sample_size": sample_size,
        }
        if terms:
            logging_output["ce_loss"] = ce_loss.data
        for name, (_, value) in terms.items():
            logging_output[name] = value.data
        if self.report_accuracy:
            n_correct, total = self.compute_accuracy(model, student.net_output, sample)
            logging_output["n_correct"] = n_correct.data.item()
            logging_output["total"] = total.data.item()
        return loss, sample_size, logging_output

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        super().reduce_metrics(logging_outputs)
        sample_size = sum(log.get("sample_size", 0) for log in logging_outputs)
        names = sorted(
            {k for log in logging_outputs for k in log if k.endswith(TERM_SUFFIX) and k not in PLAIN_KEYS}
        )
        for name in names:
            total = sum(log.get(name, 0) for log in logging_outputs)
            # base 2, like fairseq's loss and nll_loss
            metrics.log_scalar(name, total / max(sample_size, 1) / math.log(2), sample_size, round=3)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
