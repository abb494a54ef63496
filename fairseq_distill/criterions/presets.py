"""The papers' criterions: :class:`~fairseq_distill.criterions.distill.DistillationCriterion`
with fixed terms and the papers' defaults (see :mod:`fairseq_distill.criterions.options`).

* ``word_kd``: ``(1 − η)·CE_ls + η·τ²·Σ_tokens KL(p_teacher^τ ‖ p_student^τ)`` (η = 0.5).
* ``pkd``, ``ckd``, ``alp_kd``: ``β·CE_ls + η·word-KD + λ·layer loss``, β = 1 − η − λ unless
  ``--ce-weight`` is given; η = 0.1, λ = 0.7 as in Wu et al. (2020). The layer loss and layer
  map default to each paper's form (:mod:`fairseq_distill.terms.layer`).
* ``a2d``: ``(1 − α)·CE_ls + α·word-KD + β·decay^(epoch − 1)·attention KL`` (α = 0.5 and
  decay 0.9 as in Jin et al. 2024; β = 0.01, where the paper has 1 for a 6-layer teacher).

Their option names and checkpoints are those of fairseq_distill 0.1. Two defaults have changed
since, to the papers' forms: ``pkd`` sums the squared difference over the hidden dimension
(``--layer-mse-reduction mean`` is 0.1's), and ``alp_kd`` leaves the last layer of a student
with two or more layers without a layer loss (``--layer-map all`` is 0.1's).
"""
from fairseq.criterions import register_criterion

from fairseq_distill.criterions.distill import DistillationCriterion
from fairseq_distill.criterions.options import A2DConfig, ALPKDConfig, CKDConfig, PKDConfig, WordKDConfig


@register_criterion("word_kd", dataclass=WordKDConfig)
class WordKDCriterion(DistillationCriterion):
    TERMS = ("word_kd",)


@register_criterion("pkd", dataclass=PKDConfig)
class PKDCriterion(DistillationCriterion):
    TERMS = ("word_kd", "pkd")


@register_criterion("ckd", dataclass=CKDConfig)
class CKDCriterion(DistillationCriterion):
    TERMS = ("word_kd", "ckd")


@register_criterion("alp_kd", dataclass=ALPKDConfig)
class ALPKDCriterion(DistillationCriterion):
    TERMS = ("word_kd", "alp_kd")


@register_criterion("a2d", dataclass=A2DConfig)
class A2DCriterion(DistillationCriterion):
    TERMS = ("word_kd", "a2d")
