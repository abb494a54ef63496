#!/usr/bin/env bash
# IWSLT'14 De->En: the teacher and the students of A2D's Table 1 (rows.tsv), trained with fairseq-train
# and the plugin, evaluated in the paper's BLEU form and with sacreBLEU; results.md compares them with
# the paper's numbers. Run prepare.sh first (same --out).
#
#   recipes/iwslt14_de_en/run.sh [--out DIR] [--gpus N] [--no-fp16] [--stage NAME] [--rows FILE] [--dry-run] [--smoke]
#
# Stages, in order, each skipped when done with the same settings (a rerun resumes an interrupted
# training; one finished or begun with other settings is refused, naming what differs):
#   teacher   transformer_iwslt_de_en (6+6, 512, FFN 1024, 4 heads), the authors' training settings
#   cache     the teacher's top-k distributions over the training set, for the word-level KD rows
#   seqkd     the teacher's translations of the training set (fsd-seqkd, beam 5; one shard per GPU, then
#             merged), for seq-kd-3
#   students  every row of rows.tsv
#   evaluate  beam 5 on the test set, each finished row: fsd-evaluate, then both BLEU forms and chrF
#             (fsd-benchmark-score); the unfinished rows are named
#   table     OUT/results.md and OUT/results.json, finished rows only
# --gpus N trains data-parallel on N GPUs (fairseq's own), with --fp16 unless --no-fp16; without a GPU
# it runs on the CPU. --smoke: every stage at a toy size on the CPU (tiny models, a few updates), to
# test the pipeline. --dry-run prints every command with its flags and runs nothing. --rows FILE: other
# rows than rows.tsv (the same columns), e.g. a few of them.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

source "$HERE/../common.sh"
RECIPE=iwslt14_de_en
STAGES="teacher cache seqkd students evaluate table"
HELP_LINES=21
parse_run_options "$@"
check_prepared_data
check_run_workdir
device_flags
TEACHER="$RUNS/teacher/checkpoint_best.pt"

# The authors' training settings (A2D's released train_teacher.sh / train_student.sh): Adam
# (0.9, 0.98), lr 5e-4, inverse square root schedule with 4000 warm-up updates, dropout 0.3, weight
# decay 1e-4, label smoothing 0.1, 4096 tokens a batch, at most 100 epochs with patience 10, the
# checkpoint with the best validation BLEU (beam 5).
TRAIN=(--share-decoder-input-output-embed --optimizer adam --adam-betas "(0.9, 0.98)" --clip-norm 0.0
       --lr 5e-4 --lr-scheduler inverse_sqrt --warmup-updates 4000 --dropout 0.3 --weight-decay 0.0001
       --label-smoothing 0.1 --max-tokens 4096 --max-epoch 100 --patience 10 --no-epoch-checkpoints
       --eval-bleu --eval-bleu-args '{"beam": 5, "max_len_a": 1.2, "max_len_b": 10}' --eval-bleu-remove-bpe
       --best-checkpoint-metric bleu --maximize-best-checkpoint-metric --log-format simple --log-interval 100)
ARCH=(--arch transformer_iwslt_de_en)
if [ "$SMOKE" = 1 ]; then
  # a toy size: the same stages and flags, minutes on a CPU
  TRAIN+=(--max-update 6 --max-epoch 2 --max-tokens 1000 --warmup-updates 2)
  ARCH+=(--encoder-embed-dim 32 --decoder-embed-dim 32 --encoder-ffn-embed-dim 64 --decoder-ffn-embed-dim 64)
fi

if wanted teacher; then
  stage "[teacher]" "$RUNS/teacher/.done" fairseq-train "$DATA" --user-dir "$PLUGIN" "${ARCH[@]}" --task translation \
    --criterion label_smoothed_cross_entropy "${TRAIN[@]}" "${DEVICE[@]}" --save-dir "$RUNS/teacher"
fi

if wanted cache; then
  stage "[cache]" "$OUT/cache/.done" fsd-cache-teacher --teacher "$TEACHER" --data "$DATA" --out "$OUT/cache" \
    ${TOOL_DEVICE[@]+"${TOOL_DEVICE[@]}"}
fi

if wanted seqkd; then
  stage "[seqkd]" "$OUT/seqkd/.done" seqkd --data "$DATA" --teacher "$TEACHER" --out "$OUT/seqkd" --beam 5
fi

if wanted students; then
  while IFS=$'\t' read -r name layers data criterion options heads paper; do
    dir="$RUNS/$name"
    bin="$DATA"; [ "$data" = seqkd ] && bin="$OUT/seqkd"
    task=(--task translation)
    extra=()
    [ "$options" = - ] || read -r -a extra <<< "$options"
    if [ "$criterion" != label_smoothed_cross_entropy ]; then
      task=(--task translation_distill --teacher-path "$TEACHER")
      [ "$criterion" = word_kd ] && task+=(--teacher-cache "$OUT/cache")
    fi
    stage "[students] $name" "$dir/.done" fairseq-train "$bin" --user-dir "$PLUGIN" "${ARCH[@]}" \
      --encoder-layers "$layers" --decoder-layers "$layers" --encoder-attention-heads "$heads" \
      --decoder-attention-heads "$heads" "${task[@]}" --criterion "$criterion" ${extra[@]+"${extra[@]}"} \
      "${TRAIN[@]}" "${DEVICE[@]}" --save-dir "$dir" < /dev/null
  done < <(rows)
fi

if wanted evaluate; then
  run mkdir -p "$OUT/eval"
  unfinished=()
  for name in teacher $(rows | cut -f1); do
    if ! finished "$name"; then unfinished+=("$name"); continue; fi
    dir="$RUNS/$name"
    run fsd-evaluate "$dir/checkpoint_best.pt" "$DATA" --beam 5 --out "$OUT/eval/$name.json"
    run fsd-benchmark-score score iwslt14_de_en --text "$TEXT" --eval "$OUT/eval/$name.json" \
      --out "$OUT/eval/$name.scores.json"
  done
  say_unfinished evaluate ${unfinished[@]+"${unfinished[@]}"}
fi

if wanted table; then
  # the teacher's BLEU in A2D's Table 1
  run fsd-benchmark-score table iwslt14_de_en --rows "$ROWS" --teacher-paper-bleu 36.79 \
    --eval "$OUT/eval" --runs "$RUNS" --out "$OUT/results.md"
fi
