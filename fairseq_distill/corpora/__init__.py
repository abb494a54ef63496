"""The papers' benchmark corpora, prepared by their standard protocols (``fsd-benchmark-corpus``):
official archives read as they are distributed, cleaned, tokenised and split as the papers'
own preparation scripts do, every stage counted. Segmentation and binarization are then
``fsd-prepare-corpus``'s (:mod:`fairseq_distill.text.corpus`); ``recipes/<pair>/prepare.sh``
runs both."""
