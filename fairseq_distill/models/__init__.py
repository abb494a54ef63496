"""Registered model architectures (fairseq also auto-imports this folder of a user dir)."""
from fairseq_distill.models import deep_transformer, flexible_transformer  # noqa: F401
