#!/usr/bin/env bash
# Create (or reuse) the virtual environment .venv in the checkout and install the plugin.
# Idempotent: a stamp records the hash of setup.py; nothing is reinstalled while it matches.
#   VENV=path  use another environment directory
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PY="$VENV/bin/python"
STAMP="$VENV/.fairseq_distill-installed"
WANT=$(cat setup.py | sha1sum | cut -c1-16)
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ] && "$PY" -c "import fairseq_distill" 2>/dev/null; then
  exit 0
fi
LOG="$VENV.install.log"
echo "[setup] installing into $VENV (log: $LOG); the first install builds fairseq (~5 min)"
[ -x "$PY" ] || python3 -m venv "$VENV"
pip_install() { "$PY" -m pip install --disable-pip-version-check "$@" >>"$LOG" 2>&1 || { tail -n 40 "$LOG"; exit 1; }; }
: > "$LOG"
pip_install --upgrade pip setuptools wheel
# A CPU build of torch 2.13.0 where the index has it; otherwise any torch already present.
if ! "$PY" -c "import torch" 2>/dev/null; then
  "$PY" -m pip install --disable-pip-version-check "torch==2.13.0" >>"$LOG" 2>&1 || pip_install torch
fi
# fairseq builds C++/Cython extensions against the installed torch: build without isolation
pip_install numpy cython
pip_install --no-build-isolation -e ".[test]"
# fairseq lists torchaudio, and pip picks a build for another torch (a CUDA one beside torch's CPU
# build), which fails to load. fairseq's translation code never imports it, but transformers does
# when it is installed (its model classes, CTranslate2's converter): remove one that cannot load.
if "$PY" -m pip show torchaudio >/dev/null 2>&1 && ! "$PY" -c "import torchaudio" >/dev/null 2>&1; then
  echo "[setup] removing torchaudio: it cannot load beside this torch (fairseq's translation code does not use it)"
  "$PY" -m pip uninstall -y torchaudio >>"$LOG" 2>&1
fi
"$PY" -c "import fairseq_distill, fairseq, torch; print(f'[setup] fairseq {fairseq.__version__}, torch {torch.__version__}')"
echo "$WANT" > "$STAMP"
