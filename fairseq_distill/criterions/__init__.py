from fairseq_distill.criterions import distill, presets  # noqa: F401
