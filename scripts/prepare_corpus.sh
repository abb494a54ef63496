#!/usr/bin/env bash
# Wrapper of fairseq_distill.cli.prepare_corpus (see --help). Uses the checkout's .venv when present.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="$ROOT/.venv/bin/python"; [ -x "$PY" ] || PY=python3
exec "$PY" -m fairseq_distill.cli.prepare_corpus "$@"
