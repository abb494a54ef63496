#!/usr/bin/env bash
# Your data and your teacher: raw parallel text and a teacher (or none) to a deployed student and its
# report card, every fsd-* step chained for you.
#
#   recipes/own/run.sh -s SRC -t TGT --train PREFIX --valid PREFIX [--test PREFIX] [--mono FILE]
#       [--teacher PATH | --teacher-size papers|small] [--teacher-data DATA_BIN] [--method M]
#       [--teacher-pieces N] [--teacher-languages SRC_CODE TGT_CODE]
#       [--student tiny|base] [--student-epochs N] [--out DIR]
#       [--gpus N] [--no-fp16] [--stage NAME] [--num-shards N [--shard-id I]] [--dry-run] [--smoke]
#
# PREFIX.SRC and PREFIX.TGT (or .gz) are raw, aligned text, one sentence a line. Without --test the
# last pairs of the training text (at most 1,000, at most a twentieth) are held out as the test set.
# --mono FILE: more source text for the teacher to translate into seq-KD data.
# --teacher, its kind detected and said first:
#   (none)            a teacher is trained, --teacher-size papers (the default): 6+6 layers, d = 128,
#                     FFN 512, 4 heads, 20 epochs (3.80M parameters at an 8,000-piece vocabulary); small:
#                     3+3, d = 128, 5 epochs at lr 0.002 after 300 warm-up updates (make demo's)
#   CHECKPOINT.pt     a fairseq teacher; the text is prepared on its vocabulary (--teacher-data, the
#                     data-bin it was trained on, else the one its checkpoint names)
#   DIR (config.json) a Hugging Face MarianMT or M2M100/NLLB model with its tokenizer: every method; the
#                     text is prepared in the teacher's pieces (fsd-prepare-corpus --vocabulary-from DIR);
#                     --teacher-pieces N keeps its N most frequent (a 256k-piece NLLB vocabulary), and
#                     --teacher-languages gives an NLLB teacher its codes (e.g. deu_Latn eng_Latn)
#   DIR (model.bin)   a CTranslate2 model (e.g. OPUS-MT converted): seq-KD data only
#   FILE              its translations of the training source, one a line: seq-KD data only
# --method: auto (default), none, seqkd, word_kd, pkd, ckd, alp_kd, a2d.
#   auto with a fairseq or Hugging Face teacher (or none): seq-KD data (MBR over 8 hypotheses) and word-level KD from
#   a top-8 cache of the teacher over it; with a CTranslate2 model or translations: seq-KD data only
#   (the other methods read the teacher's outputs during training). Why: docs/guides.md, README.
# --student: tiny (2+2, d = 64, FFN 256; 0.75M parameters at 8,000 pieces) or base (2+2, d = 128, FFN
#   512; 1.95M), --student-epochs N (default 10). --gpus N, --no-fp16, --stage, --dry-run, --smoke as in
#   the other recipes. The teacher the recipe trains makes its seq-KD data through CTranslate2 (faster
#   on CPUs); a fairseq teacher given decodes with fairseq-generate (any architecture).
# Stages: prepare teacher seqkd cache student export report (each kept once done, refused when its
# settings change). OUT/results.md opens with the deployable student and the command to use it.
# --num-shards N --shard-id I, with --stage seqkd or cache: only the teacher's shard I of N (one per
# machine, OUT on a shared disk); the same command without --shard-id merges the N shards. Seq-KD is
# merged before its cache is made, so: seqkd shards, seqkd merge, cache shards, cache merge, the rest.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

source "$HERE/../common.sh"
RECIPE=own
STAGES="prepare teacher seqkd cache student export report"
HELP_LINES=38
METHODS="auto none seqkd word_kd pkd ckd alp_kd a2d"

SRC="" TGT="" TRAIN_PREFIX="" VALID_PREFIX="" TEST_PREFIX="-" MONO="" TEACHER_PATH="" TEACHER_DATA=""
TEACHER_VOCABULARY=()  # --teacher-pieces, --teacher-languages: fsd-prepare-corpus options of a Hugging Face teacher
TEACHER_SIZE=papers STUDENT_EPOCHS=10 METHOD=auto STUDENT=tiny OUT=work/own GPUS=0 FP16=1 STAGE=all DRY_RUN=0 SMOKE=0 NUM_SHARDS=1 SHARD_ID=""
while [ $# -gt 0 ]; do
  case "$1" in
    -s) SRC="$2"; shift 2 ;;
    -t) TGT="$2"; shift 2 ;;
    --train) TRAIN_PREFIX="$2"; shift 2 ;;
    --valid) VALID_PREFIX="$2"; shift 2 ;;
    --test) TEST_PREFIX="$2"; shift 2 ;;
    --mono) MONO="$2"; shift 2 ;;
    --teacher) TEACHER_PATH="$2"; shift 2 ;;
    --teacher-data) TEACHER_DATA="$2"; shift 2 ;;
    --teacher-size) TEACHER_SIZE="$2"; shift 2 ;;
    --teacher-pieces) TEACHER_VOCABULARY+=(--teacher-pieces "$2"); shift 2 ;;
    --teacher-languages) TEACHER_VOCABULARY+=(--teacher-languages "$2" "$3"); shift 3 ;;
    --method) METHOD="$2"; shift 2 ;;
    --student) STUDENT="$2"; shift 2 ;;
    --student-epochs) STUDENT_EPOCHS="$2"; shift 2 ;;
    --num-shards) NUM_SHARDS="$2"; shift 2 ;;
    --shard-id) SHARD_ID="$2"; shift 2 ;;
    *) if run_option "$@"; then shift "$TAKEN"; else
         echo "run.sh: unknown option '$1'; valid: -s, -t, --train, --valid, --test, --mono, --teacher," \
              "--teacher-data, --teacher-size, --teacher-pieces, --teacher-languages, --method, --student, --student-epochs, --out, --gpus, --no-fp16, --stage, --num-shards, --shard-id," \
              "--dry-run, --smoke" >&2; exit 2
       fi ;;
  esac
done
for pair in "-s:$SRC" "-t:$TGT" "--train:$TRAIN_PREFIX" "--valid:$VALID_PREFIX"; do
  [ -n "${pair#*:}" ] || { echo "run.sh: ${pair%%:*} is required (run.sh --help)" >&2; exit 2; }
done
case " $METHODS " in *" $METHOD "*) ;; *) echo "run.sh: unknown --method '$METHOD'; valid: ${METHODS// /, }" >&2; exit 2 ;; esac
case "$STUDENT" in tiny|base) ;; *) echo "run.sh: unknown --student '$STUDENT'; valid: tiny, base" >&2; exit 2 ;; esac
case "$STUDENT_EPOCHS" in ''|*[!0-9]*|0) echo "run.sh: --student-epochs must be a number of epochs (1 or more), got" \
                                              "'$STUDENT_EPOCHS'" >&2; exit 2 ;; esac
case "$TEACHER_SIZE" in papers|small) ;; *) echo "run.sh: unknown --teacher-size '$TEACHER_SIZE'; valid: papers, small" >&2
                                            exit 2 ;; esac
if [ "$TEACHER_SIZE" != papers ] && [ -n "$TEACHER_PATH" ]; then
  echo "run.sh: --teacher-size sizes the teacher the recipe trains; with --teacher $TEACHER_PATH none is trained:" \
       "give one of them" >&2; exit 2
fi
case " $STAGES all " in *" $STAGE "*) ;; *) echo "run.sh: unknown --stage '$STAGE'; valid: $STAGES (or all)" >&2; exit 2 ;; esac
case "$GPUS" in ''|*[!0-9]*) echo "run.sh: --gpus must be a number of GPUs (0: the CPU), got '$GPUS'" >&2; exit 2 ;; esac
if [ -n "$MONO" ] && [ ! -f "$MONO" ]; then echo "run.sh: --mono $MONO: no such file" >&2; exit 2; fi
case "$NUM_SHARDS" in ''|*[!0-9]*|0) echo "run.sh: --num-shards must be a number of shards (1 or more), got" \
                                         "'$NUM_SHARDS'" >&2; exit 2 ;; esac
if [ -n "$SHARD_ID" ]; then
  case "$SHARD_ID" in *[!0-9]*) SHARD_ID=x ;; esac
  if [ "$NUM_SHARDS" = 1 ] || [ "$SHARD_ID" = x ] || [ "$SHARD_ID" -ge "$NUM_SHARDS" ]; then
    echo "run.sh: --shard-id must be one of 0 to N-1 with --num-shards N (N > 1), got --shard-id ${SHARD_ID/x/not a number}" \
         "with --num-shards $NUM_SHARDS" >&2; exit 2
  fi
fi
if [ "$NUM_SHARDS" -gt 1 ] && [ "$STAGE" != seqkd ] && [ "$STAGE" != cache ]; then
  echo "run.sh: --num-shards shares out the teacher's stages: give --stage seqkd or --stage cache (each machine with" \
       "its --shard-id, then once without it to merge), then run the other stages without --num-shards" >&2; exit 2
fi

OWN="python $HERE/own.py"
KIND=$($OWN teacher "$TEACHER_PATH")
SERVES="auto none seqkd"  # what a teacher known only by its outputs can serve
READS_TEACHER=0  # the teacher's distributions and states can be read during training
case "$KIND" in fairseq|huggingface|none) READS_TEACHER=1; SERVES=$METHODS ;; esac
case " $SERVES " in *" $METHOD "*) ;; *)
  echo "run.sh: --method $METHOD needs a fairseq or Hugging Face teacher (it reads the teacher's distributions or" \
       "states during training); a $KIND teacher serves: ${SERVES// /, }" >&2; exit 2 ;; esac
if [ "$METHOD" = auto ]; then
  if [ "$READS_TEACHER" = 1 ]; then METHOD=seqkd+word_kd; else METHOD=seqkd; fi
fi
if [ "$KIND" = translations ] && [ "$NUM_SHARDS" -gt 1 ]; then
  echo "run.sh: --num-shards: a file of translations runs no teacher, so there is nothing to share out" >&2; exit 2
fi
if [ "$KIND" = translations ] && [ "$TEST_PREFIX" = - ]; then
  echo "run.sh: --teacher $TEACHER_PATH is a file of translations, one for each training pair: pass --test PREFIX," \
       "so that no training pair is held out as the test set" >&2
  exit 2
fi
if [ "${#TEACHER_VOCABULARY[@]}" -gt 0 ] && [ "$KIND" != huggingface ]; then
  echo "run.sh: ${TEACHER_VOCABULARY[0]} goes with a Hugging Face teacher (--teacher MODEL_DIR), whose pieces" \
       "the student's data is prepared in; the teacher here is ${KIND}${TEACHER_PATH:+ ($TEACHER_PATH)}" >&2; exit 2
fi
echo "[own] teacher: $KIND${TEACHER_PATH:+ ($TEACHER_PATH)}; method: $METHOD; student: $STUDENT"
if [ "$KIND" = fairseq ] && [ -z "$TEACHER_DATA" ]; then
  TEACHER_DATA=$($OWN teacher-data "$TEACHER_PATH")
  [ -n "$TEACHER_DATA" ] || { echo "run.sh: the data-bin $TEACHER_PATH was trained on is not found: pass" \
                                    "--teacher-data DATA_BIN (its dictionaries and subword model)" >&2; exit 2; }
fi

DATA="$OUT/data/bin"
RUNS="$OUT/runs"
PLUGIN="$($OWN plugin)"
check_run_workdir
# another corpus or teacher in the same --out is refused, naming it
for pair in "corpus:$(realpath -m "$TRAIN_PREFIX")" "teacher:${TEACHER_PATH:+$(realpath -m "$TEACHER_PATH")}"; do
  key=${pair%%:*} value=${pair#*:}
  found=$(record_value "$key")
  if [ -n "$found" ] && [ "$found" != "${value:-none}" ]; then
    echo "run.sh: --out $OUT is a work dir of the $key $found, not ${value:-none}: give this one a --out of its own" >&2
    exit 1
  fi
  [ -n "$found" ] || set_record "$key" "${value:-none}"
done
device_flags

# the papers' and the benchmarks' training settings (configs/foundation.yaml)
TRAIN=(--arch transformer --share-all-embeddings --optimizer adam --adam-betas "(0.9, 0.98)" --clip-norm 0.0
       --lr 0.001 --lr-scheduler inverse_sqrt --warmup-updates 500 --warmup-init-lr 1e-07 --weight-decay 0.0001
       --label-smoothing 0.1 --max-tokens 4096 --no-epoch-checkpoints --log-format simple --log-interval 50)
TEACHER_SHAPE=(--encoder-layers 6 --decoder-layers 6 --encoder-embed-dim 128 --decoder-embed-dim 128
               --encoder-ffn-embed-dim 512 --decoder-ffn-embed-dim 512 --encoder-attention-heads 4
               --decoder-attention-heads 4 --dropout 0.2 --max-epoch 20)
if [ "$TEACHER_SIZE" = small ]; then
  # the demo's teacher: half the depth and a quarter of the epochs, at a higher rate with a shorter
  # warm-up so that so few updates still train it (fairseq takes a flag's last value)
  TEACHER_SHAPE=(--encoder-layers 3 --decoder-layers 3 --encoder-embed-dim 128 --decoder-embed-dim 128
                 --encoder-ffn-embed-dim 512 --decoder-ffn-embed-dim 512 --encoder-attention-heads 4
                 --decoder-attention-heads 4 --dropout 0.1 --max-epoch 5 --lr 0.002 --warmup-updates 300)
fi
if [ "$STUDENT" = tiny ]; then
  STUDENT_SHAPE=(--encoder-embed-dim 64 --decoder-embed-dim 64 --encoder-ffn-embed-dim 256 --decoder-ffn-embed-dim 256
                 --dropout 0.1)
else
  STUDENT_SHAPE=(--encoder-embed-dim 128 --decoder-embed-dim 128 --encoder-ffn-embed-dim 512
                 --decoder-ffn-embed-dim 512 --dropout 0.2)
fi
STUDENT_SHAPE+=(--encoder-layers 2 --decoder-layers 2 --encoder-attention-heads 4 --decoder-attention-heads 4
                --max-epoch "$STUDENT_EPOCHS")
VOCAB=(--vocab-size 8000)
SEQKD_DECODING=(--beam 8 --nbest 8 --select mbr)
REPORT=()
SEQKD_MISSING=()  # --smoke: a toy teacher may write nothing for a sentence, whose reference is kept then
if [ "$SMOKE" = 1 ]; then
  # a toy size: the same stages and flags, a few minutes on a CPU
  TRAIN+=(--max-update 3 --max-tokens 1000 --warmup-updates 2)
  TEACHER_SHAPE+=(--encoder-layers 1 --decoder-layers 1 --encoder-embed-dim 16 --decoder-embed-dim 16
                  --encoder-ffn-embed-dim 32 --decoder-ffn-embed-dim 32 --encoder-attention-heads 2
                  --decoder-attention-heads 2)
  STUDENT_SHAPE+=(--encoder-layers 1 --decoder-layers 1 --encoder-embed-dim 16 --decoder-embed-dim 16
                  --encoder-ffn-embed-dim 32 --decoder-ffn-embed-dim 32 --encoder-attention-heads 2
                  --decoder-attention-heads 2)
  VOCAB=(--vocab-size 300)
  # a toy teacher of a few updates may write nothing for a sentence: its reference is kept then
  SEQKD_DECODING=(--beam 2 --nbest 2 --select mbr --on-missing reference)
  SEQKD_MISSING=(--on-missing reference)
  REPORT=(--rounds 1 --threads 1 --latency-sentences 5)
fi

TEACHER="$TEACHER_PATH"
[ "$KIND" = none ] && TEACHER="$RUNS/teacher/checkpoint_best.pt"
STUDENT_DATA="$DATA"
case "$METHOD" in seqkd*) STUDENT_DATA="$OUT/seqkd" ;; esac

# SRC TGT TRAIN VALID TEST FSD-PREPARE-CORPUS-FLAGS...: the text in OUT/text, then the data-bin
prepare() {
  run python "$HERE/own.py" split "$1" "$2" "$3" "$4" "$5" "$OUT"
  run fsd-prepare-corpus -s "$1" -t "$2" --train-prefix "$OUT/text/train" --valid-prefix "$OUT/text/valid" \
    --test-prefix "$OUT/text/test" "${@:6}" --out "$OUT/data"
}

if wanted prepare; then
  vocabulary=("${VOCAB[@]}")
  [ "$KIND" = fairseq ] && vocabulary=(--vocabulary-from "$TEACHER_DATA")
  [ "$KIND" = huggingface ] && vocabulary=(--vocabulary-from "$TEACHER_PATH" "${TEACHER_VOCABULARY[@]}")
  stage "[prepare]" "$OUT/data/.done" prepare "$SRC" "$TGT" "$TRAIN_PREFIX" "$VALID_PREFIX" "$TEST_PREFIX" \
    "${vocabulary[@]}"
fi
# one embedding table for both sides and the output where the two dictionaries are one
if [ "$DRY_RUN" = 0 ] && [ -f "$DATA/dict.$SRC.txt" ] && ! cmp -s "$DATA/dict.$SRC.txt" "$DATA/dict.$TGT.txt"; then
  TRAIN=("${TRAIN[@]/--share-all-embeddings/--share-decoder-input-output-embed}")
fi
DATA_DIGEST=""
[ "$DRY_RUN" = 1 ] || [ ! -d "$DATA" ] || DATA_DIGEST=$(data_digest "$DATA")

if wanted teacher && [ "$KIND" = none ]; then
  stage "[teacher]" "$RUNS/teacher/.done" fairseq-train "$DATA" --user-dir "$PLUGIN" --task translation \
    --criterion label_smoothed_cross_entropy "${TRAIN[@]}" "${TEACHER_SHAPE[@]}" "${DEVICE[@]}" --save-dir "$RUNS/teacher"
fi

# WHAT MARKER CMD...: a stage of the teacher (seqkd, cache) as a whole; with --num-shards N and
# --shard-id I only its shard I (kept by the tool for the merge; the stage is not done yet); with
# --num-shards N alone, the merge of the N shards, which finishes the stage
teacher_stage() {
  local what="$1" marker="$2"
  shift 2
  if [ "$NUM_SHARDS" = 1 ] || [ -f "$marker" ]; then stage "$what" "$marker" "$@"; return; fi
  if [ -z "$SHARD_ID" ]; then stage "$what" "$marker" "$@" --num-shards "$NUM_SHARDS" --merge; return; fi
  invoke "$@" --num-shards "$NUM_SHARDS" --shard-id "$SHARD_ID"  # one shard a machine, whatever its GPUs
  echo "$what shard $SHARD_ID of $NUM_SHARDS done; once all $NUM_SHARDS are, the same command without --shard-id" \
       "merges them"
}

if wanted seqkd && [ "$STUDENT_DATA" = "$OUT/seqkd" ]; then
  source_flags=()
  [ -n "$MONO" ] && source_flags=(--source "$MONO")
  # a teacher that reads raw text gets the training source as prepared (<unk> pieces cannot be read back)
  raw_source=(--raw-train-source "$OUT/data/raw/train.$SRC")
  case "$KIND" in
    ctranslate2) teacher_stage "[seqkd]" "$OUT/seqkd/.done" fsd-seqkd --teacher-ctranslate2 "$TEACHER" --data "$DATA" \
                   --out "$OUT/seqkd" --beam 4 "${raw_source[@]}" ${source_flags[@]+"${source_flags[@]}"} \
                   ${SEQKD_MISSING[@]+"${SEQKD_MISSING[@]}"} ;;
    huggingface) teacher_stage "[seqkd]" "$OUT/seqkd/.done" seqkd --teacher "$TEACHER" --data "$DATA" --out "$OUT/seqkd" \
                   "${SEQKD_DECODING[@]}" "${raw_source[@]}" ${source_flags[@]+"${source_flags[@]}"} ;;
    translations) stage "[seqkd]" "$OUT/seqkd/.done" fsd-seqkd --teacher-translations "$TEACHER" --data "$DATA" \
                    --out "$OUT/seqkd" ;;
    none) teacher_stage "[seqkd]" "$OUT/seqkd/.done" seqkd --teacher "$TEACHER" --data "$DATA" --out "$OUT/seqkd" \
            --backend ctranslate2 "${SEQKD_DECODING[@]}" ${source_flags[@]+"${source_flags[@]}"} ;;
    *) teacher_stage "[seqkd]" "$OUT/seqkd/.done" seqkd --teacher "$TEACHER" --data "$DATA" --out "$OUT/seqkd" \
         "${SEQKD_DECODING[@]}" ${source_flags[@]+"${source_flags[@]}"} ;;
  esac
fi

CRITERION=label_smoothed_cross_entropy
case "$METHOD" in *word_kd) CRITERION=word_kd ;; pkd|ckd|alp_kd|a2d) CRITERION=$METHOD ;; esac
if wanted cache && [ "$CRITERION" = word_kd ]; then
  teacher_stage "[cache]" "$OUT/cache/.done" fsd-cache-teacher --teacher "$TEACHER" --data "$STUDENT_DATA" --top-k 8 \
    --out "$OUT/cache" ${TOOL_DEVICE[@]+"${TOOL_DEVICE[@]}"}
fi

if wanted student; then
  task=(--task translation)
  if [ "$CRITERION" = word_kd ]; then
    task=(--task translation_distill --teacher-cache "$OUT/cache" --kd-weight 0.5 --kd-temperature 1.0)
  elif [ "$CRITERION" != label_smoothed_cross_entropy ]; then
    task=(--task translation_distill --teacher-path "$TEACHER")
  fi
  stage "[student]" "$RUNS/student/.done" fairseq-train "$STUDENT_DATA" --user-dir "$PLUGIN" "${task[@]}" \
    --criterion "$CRITERION" "${TRAIN[@]}" "${STUDENT_SHAPE[@]}" "${DEVICE[@]}" --save-dir "$RUNS/student"
fi

if wanted export; then
  stage "[export]" "$OUT/student-int8.done" fsd-export-ctranslate2 "$RUNS/student/checkpoint_best.pt" "$DATA" \
    "$OUT/student-int8" --quantization int8 --force
fi

if wanted report; then
  if [ "$KIND" = fairseq ] || [ "$KIND" = none ]; then
    stage "[report]" "$OUT/report.done" fsd-report "teacher=$TEACHER" "student=$RUNS/student/checkpoint_best.pt" \
      --data "$DATA" --out "$OUT/report" --force ${REPORT[@]+"${REPORT[@]}"}
  else
    run mkdir -p "$OUT/eval"
    stage "[report]" "$OUT/eval/student.done" fsd-evaluate "$RUNS/student/checkpoint_best.pt" "$DATA" \
      --out "$OUT/eval/student.json"
  fi
  run python "$HERE/own.py" results "$OUT" "$SRC" "$TGT"
fi
