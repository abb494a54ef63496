#!/usr/bin/env bash
# Wrapper of fairseq_distill.cli.export_ctranslate2 (see --help). Uses the checkout's .venv when present.
#   scripts/export_ctranslate2.sh CHECKPOINT DATA_BIN OUT_DIR [--quantization int8|int8_float32|int16|float32]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="$ROOT/.venv/bin/python"; [ -x "$PY" ] || PY=python3
exec "$PY" -m fairseq_distill.cli.export_ctranslate2 "$@"
