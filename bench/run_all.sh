#!/usr/bin/env bash
# Every CPU benchmark, in order of dependence, each recipe followed by its analyses (the GPU
# one, bench/gpu_bench.py, needs a CUDA machine, and bench/ctranslate2_threads.py is a one-off
# profile on random weights: both are run by hand); finished
# steps are skipped, so rerunning continues where the last run stopped (an interrupted
# training resumes from its last checkpoint). Finished steps are those in the work dir and,
# opted in here with --reuse-committed, the committed rows of bench/results whose cache key
# still matches: without them a session that lacks the work dir would retrain every row.
# An analysis whose results were made from the same runs and options is not redone
# (bench/analysis.py; --force on a script redoes it), except the heat maps, which are redrawn.
#   WORKDIR=dir   where data and checkpoints go (default ~/.cache/fairseq_distill/bench)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
W=${WORKDIR:-$HOME/.cache/fairseq_distill/bench}
PY=.venv/bin/python
recipe() { $PY bench/run.py "configs/$1.yaml" --workdir "$W" --reuse-committed; }

recipe foundation
$PY bench/ctranslate2_speed.py configs/foundation.yaml --workdir "$W"
$PY bench/step_cost.py configs/foundation.yaml --workdir "$W"
recipe seqkd_backends
recipe layer_kd
$PY bench/step_cost.py configs/layer_kd.yaml --workdir "$W"
$PY bench/heatmaps.py configs/layer_kd.yaml --workdir "$W"
recipe flexible_depth
$PY bench/depth_grid.py configs/flexible_depth.yaml --workdir "$W"
recipe gpkd
$PY bench/decode_speed.py configs/gpkd.yaml --workdir "$W" --reference teacher-gp
recipe a2d
$PY bench/step_cost.py configs/a2d.yaml --workdir "$W"
$PY bench/heatmaps.py configs/a2d.yaml --workdir "$W"
recipe seqkd_backends_looping
recipe external_teacher
$PY bench/seqkd_data_diff.py configs/external_teacher.yaml seqkd-backend seqkd-external --workdir "$W"
recipe readme_defaults
# the longest: every method at the teacher's width, three seeds
recipe papers
