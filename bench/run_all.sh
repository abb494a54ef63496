#!/usr/bin/env bash
# Every benchmark, in order of dependence; finished steps (local, or committed rows in
# bench/results) are skipped, so rerunning continues where the last run stopped.
#   WORKDIR=dir   where data and checkpoints go (default ~/.cache/fairseq_distill/bench)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
W=${WORKDIR:-$HOME/.cache/fairseq_distill/bench}
PY=.venv/bin/python
for recipe in foundation layer_kd a2d gpkd flexible_depth; do
  $PY bench/run.py configs/$recipe.yaml --workdir "$W"
done
$PY bench/ctranslate2_speed.py configs/foundation.yaml --workdir "$W"
$PY bench/step_cost.py configs/layer_kd.yaml --workdir "$W"
$PY bench/step_cost.py configs/a2d.yaml --workdir "$W"
$PY bench/decode_speed.py configs/gpkd.yaml --workdir "$W" --reference teacher-gp
$PY bench/depth_grid.py configs/flexible_depth.yaml --workdir "$W"
