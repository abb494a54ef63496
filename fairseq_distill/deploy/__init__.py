"""A student once distillation is over: clean decoding checkpoints (:mod:`.checkpoint`),
CTranslate2 exports (:mod:`.ctranslate2_export`) and raw-text translation (:mod:`.translators`)."""
