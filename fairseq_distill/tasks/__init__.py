from fairseq_distill.tasks import translation_distill  # noqa: F401
