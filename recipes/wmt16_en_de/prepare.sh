#!/usr/bin/env bash
# GPKD's "WMT'16" English->German (Li et al., AAAI 2021: about 4.5M tokenised pairs, 32K joint BPE
# merges, newstest2016 for validation, newstest2014 for test): download (or --archive DIR), checksums,
# the protocol (fsd-benchmark-corpus wmt16_en_de: the Google-prepared WMT'16 bundle's wmt16_en_de.sh,
# Moses tokenisation, clean-corpus-n 1 80, no lowercasing), then a joint subword-nmt BPE of 32,000
# merges and binarization with a joined dictionary (fsd-prepare-corpus). Each stage is skipped when its
# output exists; every stage counts its lines and stops on a mismatch.
#
#   recipes/wmt16_en_de/prepare.sh [--out DIR] [--archive DIR] [--no-checksum] [--vocab-size N] [--workers N] [--dry-run]
#
# --archive DIR: a directory holding the official archives (under any names) or what they unpack
# to, instead of downloading. --vocab-size: the number of BPE merges (default 32000, the paper's).
# --workers: processes for the per-line steps and fairseq-preprocess (default: all CPUs).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$HERE/../common.sh"

CORPUS=wmt16_en_de
HELP_LINES=13
VOCAB=32000
# the official WMT archives (recipes/common.sh) and this recipe's News Commentary release, for which
# no checksum is recorded
ARCHIVES=("${WMT_ARCHIVES[@]}"
  "training-parallel-nc-v11.tgz http://data.statmt.org/wmt16/translation-task/training-parallel-nc-v11.tgz -")

parse_prepare_options "$@"
claim_workdir "$CORPUS" prepare.sh  # another recipe's work dir is refused before anything is written
fetch_archives
check_archives

prepare_text_and_data en de --bpe subword_nmt --vocab-size "$VOCAB"
