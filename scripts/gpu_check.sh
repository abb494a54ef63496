#!/usr/bin/env bash
# Mixed-precision (--fp16, --bf16) and two-GPU training of every criterion and model, on a
# CUDA machine; without CUDA it says so and exits 0. Options: see scripts/gpu_check.py.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
exec .venv/bin/python scripts/gpu_check.py "$@"
