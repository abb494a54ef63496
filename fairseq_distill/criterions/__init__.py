from fairseq_distill.criterions import a2d, alp_kd, ckd, pkd, word_kd  # noqa: F401
