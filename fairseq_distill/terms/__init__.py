"""Distillation terms: each kind of KD as one module, summed with weights by the criterion.

A term declares the features it reads (:attr:`DistillationTerm.request`), owns its learned
parameters (fairseq optimises and checkpoints them as the criterion's), and returns its
value at the scale of a sum over the batch, which the criterion divides by ``sample_size``. :class:`~fairseq_distill.criterions.distill.DistillationCriterion`
adds ``Σ weight·term`` to the label-smoothed cross-entropy, like torchdistill's weighted
sum of named losses. Each term registers itself by name on import
(:mod:`fairseq_distill.terms.registry`); importing this package registers them all.
"""
from fairseq_distill.terms.base import DistillationTerm, TermContext  # noqa: F401
from fairseq_distill.terms.registry import TERMS, build_terms, parse_term_names, register_term  # noqa: F401
# registration order is the order of --distill-terms' list and of the option groups in --help
from fairseq_distill.terms.word import WordKDTerm  # noqa: F401,E402
from fairseq_distill.terms.layer import ALPKDTerm, CKDTerm, LayerKDTerm, PKDTerm  # noqa: F401,E402
from fairseq_distill.terms.attention import AttentionKDTerm  # noqa: F401,E402
