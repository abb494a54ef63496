#!/usr/bin/env bash
# WMT'14 En->De: the 12-layer (6+6) teacher and the 4-layer (2+2) students of A2D's Table 2 and CKD's
# large-data Table 3 (rows.tsv), trained with fairseq-train and the plugin, evaluated in the
# Vaswani et al. BLEU form (tokenised, compound-split) and with sacreBLEU and chrF; results.md
# compares them with the papers' numbers. Run prepare.sh first (same --out).
#
#   recipes/wmt14_en_de/run.sh [--out DIR] [--gpus N] [--no-fp16] [--stage NAME] [--rows FILE] [--dry-run] [--smoke]
#
# Stages, in order, each skipped when done with the same settings (a rerun resumes an interrupted
# training; one finished or begun with other settings is refused, naming what differs):
#   teacher   transformer_wmt_en_de (6+6, 512, FFN 2048, 8 heads), Vaswani et al.'s base settings
#   students  every row of rows.tsv: 2+2 students with no KD, PKD, CKD (rc, oc) and A2D
#   evaluate  beam 4, length penalty 0.6 on newstest2014, each finished row: fsd-evaluate, then both
#             BLEU forms and chrF; the unfinished rows are named
#   table     OUT/results.md and OUT/results.json, finished rows only
# --gpus N trains data-parallel on N GPUs (fairseq's own), with --fp16 unless --no-fp16; without a GPU
# it runs on the CPU. --smoke: every stage at a toy size on the CPU (tiny models, a few updates), to
# test the pipeline. --dry-run prints every command with its flags and runs nothing.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

source "$HERE/../common.sh"
RECIPE=wmt14_en_de
STAGES="teacher students evaluate table"
HELP_LINES=18
parse_run_options "$@"
check_prepared_data
check_run_workdir
device_flags
TEACHER="$RUNS/teacher/checkpoint_last.pt"

# Vaswani et al. (2017)'s base settings, which CKD ("identical to those of Vaswani et al.") and A2D
# ("set identically with Vaswani et al.") defer to: shared embeddings, Adam (0.9, 0.98, eps 1e-9), the
# inverse square root schedule with 4000 warm-up updates peaking at 512^-0.5 * 4000^-0.5 = 7e-4,
# dropout 0.1, label smoothing 0.1, about 25,000 tokens a batch (3,584 a GPU times --update-freq),
# 100,000 updates. The last checkpoint is evaluated (Vaswani et al. average the last five: the last
# five epochs' checkpoints are kept for that; the plugin has no averaging tool).
G=$(( GPUS > 0 ? GPUS : 1 ))
UPDATE_FREQ=$(( (25000 + 3584 * G - 1) / (3584 * G) ))
TRAIN=(--share-all-embeddings --optimizer adam --adam-betas "(0.9, 0.98)" --adam-eps 1e-09 --clip-norm 0.0
       --lr 0.0007 --lr-scheduler inverse_sqrt --warmup-updates 4000 --warmup-init-lr 1e-07 --dropout 0.1
       --weight-decay 0.0 --label-smoothing 0.1 --max-tokens 3584 --update-freq "$UPDATE_FREQ"
       --max-update 100000 --keep-last-epochs 5 --log-format simple --log-interval 100)
ARCH=(--arch transformer_wmt_en_de)
# beam 4, length penalty 0.6, output up to the input's length + 50 (Vaswani et al.)
DECODE=(--beam 4 --lenpen 0.6 --max-len-a 1 --max-len-b 50)
SMOKE_TRAIN=()
if [ "$SMOKE" = 1 ]; then
  # a toy size: the same stages and flags, minutes on a CPU; given last, so they win
  SMOKE_TRAIN=(--max-update 6 --max-epoch 2 --max-tokens 1000 --update-freq 1 --warmup-updates 2)
  ARCH+=(--encoder-embed-dim 32 --decoder-embed-dim 32 --encoder-ffn-embed-dim 64 --decoder-ffn-embed-dim 64)
fi


if wanted teacher; then
  stage "[teacher]" "$RUNS/teacher/.done" fairseq-train "$DATA" --user-dir "$PLUGIN" "${ARCH[@]}" --task translation \
    --criterion label_smoothed_cross_entropy "${TRAIN[@]}" "${DEVICE[@]}" ${SMOKE_TRAIN[@]+"${SMOKE_TRAIN[@]}"} \
    --save-dir "$RUNS/teacher"
fi


if wanted students; then
  while IFS=$'\t' read -r name layers data criterion options heads paper; do
    dir="$RUNS/$name"
    task=(--task translation)
    extra=()
    [ "$options" = - ] || read -r -a extra <<< "$options"
    if [ "$criterion" != label_smoothed_cross_entropy ]; then
      task=(--task translation_distill --teacher-path "$TEACHER")
    fi
    stage "[students] $name" "$dir/.done" fairseq-train "$DATA" --user-dir "$PLUGIN" "${ARCH[@]}" \
      --encoder-layers "$layers" --decoder-layers "$layers" --encoder-attention-heads "$heads" \
      --decoder-attention-heads "$heads" "${task[@]}" --criterion "$criterion" "${TRAIN[@]}" \
      ${extra[@]+"${extra[@]}"} "${DEVICE[@]}" ${SMOKE_TRAIN[@]+"${SMOKE_TRAIN[@]}"} --save-dir "$dir" < /dev/null
  done < <(rows)
fi

if wanted evaluate; then
  run mkdir -p "$OUT/eval"
  unfinished=()
  for name in teacher $(rows | cut -f1); do
    if ! finished "$name"; then unfinished+=("$name"); continue; fi
    run fsd-evaluate "$RUNS/$name/checkpoint_last.pt" "$DATA" "${DECODE[@]}" --out "$OUT/eval/$name.json"
    run fsd-benchmark-score score wmt14_en_de --text "$TEXT" --eval "$OUT/eval/$name.json" \
      --out "$OUT/eval/$name.scores.json"
  done
  say_unfinished evaluate ${unfinished[@]+"${unfinished[@]}"}
fi

if wanted table; then
  # the teacher's BLEU: A2D's Table 2 and CKD's Table 3 (two pipelines, two numbers)
  run fsd-benchmark-score table wmt14_en_de --rows "$ROWS" --teacher-paper-bleu "27.70 (A2D) / 27.03 (CKD)" --teacher-layers 6 --teacher-heads 8 \
    --eval "$OUT/eval" --runs "$RUNS" --out "$OUT/results.md"
fi
