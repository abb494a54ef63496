"""Sequence-level KD data (``fsd-seqkd``): :class:`~fairseq_distill.seqkd.inputs.SeqKDJob` says
what to make, :func:`~fairseq_distill.seqkd.job.make_seqkd_data` makes it. Decoding backends:
stock fairseq-generate, or CTranslate2 by fairseq's rules (:mod:`.ctranslate2_backend`)."""
