"""Distillation terms: each kind of KD as one module, summed with weights by the criterion.

A term declares the features it reads (:attr:`DistillationTerm.request`), owns its learned
parameters (fairseq optimises and checkpoints them as the criterion's), and returns its
value at the scale of a sum over the batch, which the criterion divides by ``sample_size``. :class:`~fairseq_distill.criterions.distill.DistillationCriterion`
adds ``Σ weight·term`` to the label-smoothed cross-entropy, like torchdistill's weighted
sum of named losses.
"""
from fairseq_distill.terms.base import DistillationTerm, TermContext  # noqa: F401
from fairseq_distill.terms.word import WordKDTerm  # noqa: F401
from fairseq_distill.terms.layer import LayerKDTerm  # noqa: F401
from fairseq_distill.terms.attention import AttentionKDTerm  # noqa: F401
