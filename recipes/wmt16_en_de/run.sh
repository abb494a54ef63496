#!/usr/bin/env bash
# GPKD's "WMT'16" En->De (Li et al., AAAI 2021): the deep pre-norm RPR teacher (48+6) trained with
# group permutation, Skipping Sub-Layer, sequence-level KD data, GPKD students extracted from the
# teacher with fsd-extract-student, and the DESDAR rows (rows.tsv); evaluated in GPKD's BLEU form
# (case-sensitive tokenised, compound-split) and with sacreBLEU and chrF; results.md compares them
# with the paper's numbers. Run prepare.sh first (same --out).
#
#   recipes/wmt16_en_de/run.sh [--out DIR] [--gpus N] [--no-fp16] [--stage NAME] [--rows FILE] [--dry-run] [--smoke]
#
# Stages, in order, each skipped when done with the same settings (a rerun resumes an interrupted
# training; one finished or begun with other settings is refused, naming what differs):
#   teacher   Deep-RPR-48L: deep_transformer_48_6 (pre-norm, relative positions k = 8, 512, FFN 2048,
#             8 heads), encoder layers permuted in groups of 8 and decoder layers in one group of 6
#   skip      the rows continued from a trained model (continue:PARENT): Skipping Sub-Layer, phi = 0.4
#   seqkd     each teacher's translations of the training set (fsd-seqkd, beam 4; one shard per GPU,
#             then merged), for seqkd:PARENT rows
#   extract   the students that start from a teacher's layers (extract:PARENT), one layer per group
#   students  every other row of rows.tsv, from scratch or from its extracted layers
#   evaluate  beam 4, length penalty 0.6 on newstest2014, each finished row: fsd-evaluate, then both
#             BLEU forms and chrF; the unfinished rows are named
#   table     OUT/results.md and OUT/results.json, finished rows only
# --gpus N trains data-parallel on N GPUs (fairseq's own), with --fp16 unless --no-fp16; without a GPU
# it runs on the CPU. --smoke: every stage at a toy width on the CPU (a few updates), to test the
# pipeline. --dry-run prints every command with its flags and runs nothing.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

source "$HERE/../common.sh"
RECIPE=wmt16_en_de
STAGES="teacher skip seqkd extract students evaluate table"
ROW_DATA='@(original|seqkd:+([A-Za-z0-9_.+-]))'
ROW_DATA_HELP="original, seqkd:PARENT (a row's name)"
HELP_LINES=24
parse_run_options "$@"
check_prepared_data
check_run_workdir
device_flags

# GPKD "followed the hyper-parameters used in Wang et al. (2019)"; the values are those of the
# authors' released scripts (group_permutation_train.sh): shared embeddings, Adam (0.9, 0.997), lr
# 0.002, inverse square root schedule with 16,000 warm-up updates from 1e-7, dropout, attention and
# ReLU dropout 0.1, label smoothing 0.1, no weight decay; the paper's 4,096 tokens a GPU with updates
# every two steps on the scripts' 8 GPUs (--update-freq makes up the rest on fewer), 50K updates (the
# paper's "Deep" budget; the same for every model here). The last checkpoint is evaluated (the paper
# averages checkpoints: the last five epochs' are kept for that; the plugin has no averaging tool).
G=$(( GPUS > 0 ? GPUS : 1 ))
UPDATE_FREQ=$(( (16 + G - 1) / G ))
TRAIN=(--share-all-embeddings --optimizer adam --adam-betas "(0.9, 0.997)" --clip-norm 0.0 --lr 0.002
       --lr-scheduler inverse_sqrt --warmup-updates 16000 --warmup-init-lr 1e-07 --dropout 0.1
       --attention-dropout 0.1 --activation-dropout 0.1 --weight-decay 0.0 --label-smoothing 0.1
       --max-tokens 4096 --update-freq "$UPDATE_FREQ" --max-update 50000 --keep-last-epochs 5
       --log-format simple --log-interval 100)
# relative positions clipped at 8, keys only (the released code's max_relative_length, k_only)
RPR=(--max-relative-length 8)
TEACHER_ARCH=(--arch deep_transformer_48_6 "${RPR[@]}" --encoder-group-size 8 --decoder-group-size 6)
# beam 4, length penalty 0.6 (the paper); output up to the input's length + 50 (Vaswani et al.)
DECODE=(--beam 4 --lenpen 0.6 --max-len-a 1 --max-len-b 50)
WIDTH=()
SMOKE_TRAIN=()
if [ "$SMOKE" = 1 ]; then
  # a toy width at the paper's depths: the same stages and flags, on a CPU; given last, so they win
  SMOKE_TRAIN=(--max-update 6 --max-epoch 2 --max-tokens 1000 --update-freq 1 --warmup-updates 2 --patience 1)
  WIDTH=(--encoder-embed-dim 16 --decoder-embed-dim 16 --encoder-ffn-embed-dim 32 --decoder-ffn-embed-dim 32)
fi

checkpoint() { echo "$RUNS/$1/checkpoint_last.pt"; }

# WHAT NAME DATA_BIN ARCH_FLAGS... -- EXTRA_FLAGS...: fairseq-train, the recipe's settings, into RUNS/NAME
# as a stage (common.sh); FROM: the flags it starts from (--restore-file ...), given on its first
# launch only: a run with a checkpoint of its own goes on from it
train() {
  local what="$1" name="$2" bin="$3"; shift 3
  local arch=() extra=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do arch+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  extra=("$@")
  FIRST_ONLY=${#FROM[@]} stage "$what" "$RUNS/$name/.done" fairseq-train "$bin" --user-dir "$PLUGIN" "${arch[@]}" \
    ${WIDTH[@]+"${WIDTH[@]}"} --task translation --criterion label_smoothed_cross_entropy "${TRAIN[@]}" \
    ${extra[@]+"${extra[@]}"} "${DEVICE[@]}" ${SMOKE_TRAIN[@]+"${SMOKE_TRAIN[@]}"} --save-dir "$RUNS/$name" \
    ${FROM[@]+"${FROM[@]}"} < /dev/null
}

# a row's options: "-" (from scratch), "continue:PARENT FLAGS" (PARENT's training continued with FLAGS)
# or "extract:PARENT FLAGS" (fsd-extract-student FLAGS on PARENT, then trained from those layers)
row_kind() { case "$1" in continue:*) echo continue ;; extract:*) echo extract ;; *) echo scratch ;; esac; }
row_parent() { local first="${1%% *}"; echo "${first#*:}"; }
row_flags() { case "$1" in *" "*) echo "${1#* }" ;; *) echo "" ;; esac; }
shape() {  # LAYERS (E+D) HEADS: the architecture flags of a row
  echo --arch deep_transformer "${RPR[@]}" --encoder-layers "${1%+*}" --decoder-layers "${1#*+}" \
    --encoder-attention-heads "$2" --decoder-attention-heads "$2"
}
FROM=()

if wanted teacher; then
  train "[teacher]" teacher "$DATA" "${TEACHER_ARCH[@]}"
fi

# GPKD's KD is sequence-level only (its data column): every row trains with the cross-entropy
while IFS=$'\t' read -r name layers data criterion options heads paper; do
  if [ "$criterion" != label_smoothed_cross_entropy ]; then
    echo "run.sh: $HERE/rows.tsv: row $name has criterion $criterion; GPKD's rows all train with" \
         "label_smoothed_cross_entropy (its KD is the seq-KD data of the data column)" >&2
    exit 2
  fi
done < <(rows)

if wanted skip; then
  while IFS=$'\t' read -r name layers data criterion options heads paper; do
    [ "$(row_kind "$options")" = continue ] || continue
    parent=$(row_parent "$options")
    read -r -a flags <<< "$(row_flags "$options")"
    # stage 2 keeps the parent's weights, optimizer and schedule; epochs and meters start afresh
    FROM=(--restore-file "$(checkpoint "$parent")" --reset-dataloader --reset-meters)
    read -r -a arch <<< "$(shape "$layers" "$heads")"
    train "[skip] $name" "$name" "$DATA" "${arch[@]}" -- ${flags[@]+"${flags[@]}"}
    FROM=()
  done < <(rows)
fi

seqkd_dir() { echo "$OUT/seqkd-$1"; }

if wanted seqkd; then
  for parent in $(rows | cut -f3 | grep '^seqkd:' | sed 's/^seqkd://' | sort -u); do
    stage "[seqkd] $parent" "$(seqkd_dir "$parent")/.done" seqkd --data "$DATA" --teacher "$(checkpoint "$parent")" \
      --out "$(seqkd_dir "$parent")" --beam 4 --lenpen 0.6
  done
fi

if wanted extract; then
  while IFS=$'\t' read -r name layers data criterion options heads paper; do
    [ "$(row_kind "$options")" = extract ] || continue
    read -r -a flags <<< "$(row_flags "$options")"
    stage "[extract] $name" "$RUNS/$name/init.pt.done" fsd-extract-student "$(checkpoint "$(row_parent "$options")")" \
      "$RUNS/$name/init.pt" ${flags[@]+"${flags[@]}"}
  done < <(rows)
fi

if wanted students; then
  while IFS=$'\t' read -r name layers data criterion options heads paper; do
    kind=$(row_kind "$options")
    [ "$kind" = continue ] && continue
    bin="$DATA"
    case "$data" in seqkd:*) bin=$(seqkd_dir "${data#seqkd:}") ;; esac
    FROM=()
    if [ "$kind" = extract ]; then
      FROM=(--restore-file "$RUNS/$name/init.pt" --reset-optimizer --reset-lr-scheduler --reset-meters
            --reset-dataloader)
    fi
    read -r -a arch <<< "$(shape "$layers" "$heads")"
    train "[students] $name" "$name" "$bin" "${arch[@]}" --
    FROM=()
  done < <(rows)
fi

if wanted evaluate; then
  run mkdir -p "$OUT/eval"
  unfinished=()
  for name in teacher $(rows | cut -f1); do
    if ! finished "$name"; then unfinished+=("$name"); continue; fi
    run fsd-evaluate "$(checkpoint "$name")" "$DATA" "${DECODE[@]}" --out "$OUT/eval/$name.json"
    run fsd-benchmark-score score wmt16_en_de --text "$TEXT" --eval "$OUT/eval/$name.json" \
      --out "$OUT/eval/$name.scores.json"
  done
  say_unfinished evaluate ${unfinished[@]+"${unfinished[@]}"}
fi

if wanted table; then
  # the teacher's BLEU: Deep-RPR-48L in GPKD's Table 1 (checkpoints averaged; 29.19 single, Table 5)
  run fsd-benchmark-score table wmt16_en_de --rows "$ROWS" --teacher-paper-bleu 30.03 --teacher-layers 48+6 --teacher-heads 8 \
    --eval "$OUT/eval" --runs "$RUNS" --out "$OUT/results.md"
fi
