"""Evaluating checkpoints: stock fairseq-generate in a subprocess (:mod:`.generate`), detokenised
output scored by sacreBLEU (:mod:`.evaluate`, :mod:`.scoring`), and plots (:mod:`.plotting`)."""
