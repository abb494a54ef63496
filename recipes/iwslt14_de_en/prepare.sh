#!/usr/bin/env bash
# IWSLT'14 German->English as the CKD, A2D and flexible-depth papers used it (fairseq's
# prepare-iwslt14.sh protocol): download (or --archive), checksum, the protocol's cleaning,
# Moses tokenisation and lowercasing (fsd-benchmark-corpus), then a joint BPE of 10,000 merges
# and binarization with a joined dictionary (fsd-prepare-corpus). Each stage is skipped when
# its output exists; every stage counts its lines and stops on a mismatch.
#
#   recipes/iwslt14_de_en/prepare.sh [--out DIR] [--archive de-en.tgz|DIR] [--no-checksum] [--vocab-size N]
#                                    [--workers N] [--dry-run]
#
# --vocab-size: the number of BPE merges (default 10000, the protocol's); --workers: processes for
# the per-line steps and fairseq-preprocess (default: all CPUs).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$HERE/../common.sh"

CORPUS=iwslt14_de_en
HELP_LINES=12
VOCAB=10000
# the archive's MD5 as another project's preparation script records it; not verified here (no
# network where this recipe was written): a mismatch stops, --no-checksum skips the check
ARCHIVES=("de-en.tgz http://dl.fbaipublicfiles.com/fairseq/data/iwslt14/de-en.tgz md5:10936dfdf616504ddbd844e91b94ef4a")

parse_prepare_options "$@"
claim_workdir "$CORPUS" prepare.sh  # another recipe's work dir is refused before anything is written
fetch_archives
check_archives
prepare_text_and_data de en --bpe subword_nmt --vocab-size "$VOCAB" --keep-blank-test-lines
