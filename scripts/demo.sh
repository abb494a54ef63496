#!/usr/bin/env bash
# The demo: on Multi30k de->en, prepare data, train a small teacher, make seq-KD data, train
# students without KD, with word-level KD and with seq-KD + word-level KD, evaluate all and
# print one table. Rerunning reuses finished steps. ~25 min on 2 CPU cores.
# The terminal shows one line per step (and its epochs); each step's full output goes to
# step.log in its directory under the work dir, and a failing step shows the end of its log.
#   DEMO_CONFIG=configs/other.yaml   another recipe (e.g. larger settings)
#   DEMO_WORKDIR=dir                 where data and checkpoints go (default work/demo)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
CONFIG=${DEMO_CONFIG:-configs/demo.yaml}
exec .venv/bin/python bench/run.py "$CONFIG" --workdir "${DEMO_WORKDIR:-work/demo}" \
  --results "${DEMO_WORKDIR:-work/demo}/results" "$@"
