#!/usr/bin/env bash
# Prepare the vendored Multi30k de-en copy: scripts/prepare_multi30k.sh OUT_DIR [prepare_corpus options]
# e.g. --bpe subword_nmt --vocab-size 10000. The binarized data ends up in OUT_DIR/bin.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT=${1:?usage: prepare_multi30k.sh OUT_DIR [options]}; shift
D="$ROOT/data/multi30k"
exec bash "$ROOT/scripts/prepare_corpus.sh" -s de -t en --train-prefix "$D/train" \
  --valid-prefix "$D/val" --test-prefix "$D/test_2016_flickr" --out "$OUT" "$@"
