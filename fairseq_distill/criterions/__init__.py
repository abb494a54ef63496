from fairseq_distill.criterions import alp_kd, ckd, pkd, word_kd  # noqa: F401
