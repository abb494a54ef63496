#!/usr/bin/env bash
# WMT'14 English->German as CKD and A2D use it ("follows Vaswani et al. (2017)": the WMT'14 training
# data, about 4.5M pairs; newstest2013 for validation, the full newstest2014 for test): download (or
# --archive DIR), checksums, the protocol's cleaning (fsd-benchmark-corpus wmt14_en_de: fairseq's
# prepare-wmt14en2de.sh --icml17 cleaning, no Moses tokenisation, no lowercasing), then a joint
# SentencePiece model of 37,000 pieces and binarization with a joined dictionary (fsd-prepare-corpus).
# Each stage is skipped when its output exists; every stage counts its lines and stops on a mismatch.
#
#   recipes/wmt14_en_de/prepare.sh [--out DIR] [--archive DIR] [--no-checksum] [--vocab-size N] [--workers N] [--dry-run]
#
# --archive DIR: a directory holding the official archives (under any names) or what they unpack
# to, instead of downloading. --vocab-size: the SentencePiece vocabulary (default 37000, CKD's for
# the full data). --workers: processes for the per-line steps and fairseq-preprocess (default: all CPUs).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$HERE/../common.sh"

CORPUS=wmt14_en_de
HELP_LINES=13
VOCAB=37000
# the official WMT archives (recipes/common.sh) and this recipe's News Commentary release, for which
# no checksum is recorded
ARCHIVES=("${WMT_ARCHIVES[@]}"
  "training-parallel-nc-v9.tgz http://statmt.org/wmt14/training-parallel-nc-v9.tgz -")

parse_prepare_options "$@"
claim_workdir "$CORPUS" prepare.sh  # another recipe's work dir is refused before anything is written
fetch_archives
check_archives

prepare_text_and_data en de --bpe sentencepiece --spm-model-type unigram --vocab-size "$VOCAB"
