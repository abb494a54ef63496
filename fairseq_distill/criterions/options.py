"""The criterions' options: fairseq's label-smoothed cross-entropy options, the options every
distillation criterion shares (:class:`CommonOptions`), and the option groups of its terms,
which each term module declares with its registration (:mod:`fairseq_distill.terms.registry`)
and which hold each method's defaults. :func:`criterion_config` combines them: a preset gets
the groups of its terms, ``--criterion distill`` every group.
"""
from dataclasses import dataclass, field, make_dataclass
from typing import Optional, Sequence

from fairseq.criterions.label_smoothed_cross_entropy import LabelSmoothedCrossEntropyCriterionConfig
from omegaconf import II

from fairseq_distill import terms  # noqa: F401  (registers the terms)
from fairseq_distill.terms.registry import option_groups


@dataclass
class CommonOptions:
    ce_weight: Optional[float] = field(
        default=None,
        metadata={"help": "weight of the label-smoothed CE (default: 1 − the weights of word-level "
                  "and layer KD; attention KD comes on top)"},
    )
    collapse_window: int = field(
        default=100,
        metadata={"help": "check every N updates whether a layer or attention KD term is collapsing "
                  "(its loss per token fallen to 5%% or less of its highest, over windows of N "
                  "updates) and warn, naming the term and the fix; 0 turns the check off"},
    )
    stop_on_collapse: bool = field(
        default=False, metadata={"help": "end the run with that message instead of warning"}
    )
    reset_distill_parameters: bool = field(
        default=False,
        metadata={"help": "when resuming, start the criterion's learned parameters (layer "
                  "projections, attention alignment) afresh instead of loading them"},
    )
    # fairseq's own --reset-optimizer, which a resume needs where the checkpoint's optimizer
    # state cannot hold the criterion's parameters (no command-line option of its own)
    reset_optimizer: bool = II("checkpoint.reset_optimizer")
    # the run's length, for --stop-on-collapse's check that two windows fit in it
    max_update: int = II("optimization.max_update")


@dataclass
class CriterionConfig(CommonOptions, LabelSmoothedCrossEntropyCriterionConfig):
    # fairseq's default is 0.0; the papers follow Vaswani et al. (2017): 0.1, for every criterion
    # alike, so that a preset and --criterion distill with its terms train alike on equal flags
    label_smoothing: float = field(default=0.1, metadata={"help": "epsilon for label smoothing (the "
                                                                  "papers' 0.1; 0 for none)"})


def criterion_config(name: str, term_names: Sequence[str] = (), extra_fields=()) -> type:
    """A criterion's config dataclass: :class:`CriterionConfig` plus the option groups of the
    terms named (all registered terms if none are), each group once."""
    groups = option_groups(term_names)
    # dataclass fields come from the bases in reverse MRO order: listing the groups last-first
    # keeps fairseq's own options at the top of --help and the groups in registration order
    config = make_dataclass(name, list(extra_fields), bases=tuple(reversed(groups)) + (CriterionConfig,))
    config.__module__ = __name__  # where it is defined, for tracebacks and pickles
    return config


WordKDConfig = criterion_config("WordKDConfig", ("word_kd",))
PKDConfig = criterion_config("PKDConfig", ("word_kd", "pkd"))
CKDConfig = criterion_config("CKDConfig", ("word_kd", "ckd"))
ALPKDConfig = criterion_config("ALPKDConfig", ("word_kd", "alp_kd"))
A2DConfig = criterion_config("A2DConfig", ("word_kd", "a2d"))
DistillConfig = criterion_config("DistillConfig", extra_fields=[(
    "distill_terms", str, field(
        default="word_kd",
        metadata={"help": "comma list of terms to sum: word_kd, at most one layer-KD term (pkd, ckd, "
                  "alp_kd) and a2d, e.g. 'word_kd,ckd,a2d'"}))])
