from fairseq_distill.tasks import translation_distill, translation_multidepth  # noqa: F401
