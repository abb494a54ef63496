from fairseq_distill.criterions import word_kd  # noqa: F401
