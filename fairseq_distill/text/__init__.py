"""Text in and out: one-sentence-per-line files (:mod:`.files`), subword segmentation as the data
was prepared (:mod:`.segmentation`), and corpus preparation for ``fsd-prepare-corpus``
(:mod:`.corpus`)."""
