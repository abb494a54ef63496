#!/usr/bin/env bash
# WMT'14 English->German as CKD and A2D use it ("follows Vaswani et al. (2017)": the WMT'14 training
# data, about 4.5M pairs; newstest2013 for validation, the full newstest2014 for test): download (or
# --archive DIR), checksums, the protocol's cleaning (fsd-benchmark-corpus wmt14_en_de: fairseq's
# prepare-wmt14en2de.sh --icml17 cleaning, no Moses tokenisation, no lowercasing), then a joint
# SentencePiece model of 37,000 pieces and binarization with a joined dictionary (fsd-prepare-corpus).
# Each stage is skipped when its output exists; every stage counts its lines and stops on a mismatch.
#
#   recipes/wmt14_en_de/prepare.sh [--out DIR] [--archive DIR] [--no-checksum] [--vocab-size N] [--workers N] [--dry-run]
#
# --archive DIR: a directory holding the official archives (under any names) or what they unpack
# to, instead of downloading. --vocab-size: the SentencePiece vocabulary (default 37000, CKD's for
# the full data). --workers: processes for the per-line steps and fairseq-preprocess (default: all CPUs).
set -euo pipefail

CORPUS=wmt14_en_de
VOCAB=37000
# name, URL (fairseq's prepare-wmt14en2de.sh --icml17), and the checksum another project records for
# it ("-": none found); none of them has been verified here (no network where this recipe was written)
ARCHIVES=(
  "training-parallel-europarl-v7.tgz http://statmt.org/wmt13/training-parallel-europarl-v7.tgz sha256:0224c7c710c8a063dfd893b0cc0830202d61f4c75c17eb8e31836103d27d96e7"
  "training-parallel-commoncrawl.tgz http://statmt.org/wmt13/training-parallel-commoncrawl.tgz sha256:c7a74e2ea01ac6c920123108627e35278d4ccb5701e15428ffa34de86fa3a9e5"
  "training-parallel-nc-v9.tgz http://statmt.org/wmt14/training-parallel-nc-v9.tgz -"
  "dev.tgz http://data.statmt.org/wmt17/translation-task/dev.tgz sha256:9d5ff04a28496b7796904ea65e50e3837bab14dbdca88b1e063105f17513dca9"
  "test-full.tgz http://statmt.org/wmt14/test-full.tgz md5:a8cd784e006feb32ac6f3d9ec7eb389a"
)

OUT=work/$CORPUS
ARCHIVE=""
CHECKSUM=1
DRY_RUN=0
WORKERS=$(nproc 2>/dev/null || echo 1)
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT="$2"; shift 2 ;;
    --archive) ARCHIVE="$2"; shift 2 ;;
    --no-checksum) CHECKSUM=0; shift ;;
    --vocab-size) VOCAB="$2"; shift 2 ;;
    --workers) WORKERS="$2"; shift 2 ;;
    --dry-run) DRY_RUN=1; shift ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "prepare.sh: unknown option '$1'; valid: --out DIR, --archive DIR, --no-checksum, --vocab-size N," \
            "--workers N, --dry-run" >&2; exit 2 ;;
  esac
done

run() {  # print the command, quoted as a shell reads it; run it unless --dry-run
  echo "+ $(printf '%q ' "$@")"
  [ "$DRY_RUN" = 1 ] || "$@"
}

if [ -z "$ARCHIVE" ]; then
  ARCHIVE="$OUT/orig"
  run mkdir -p "$ARCHIVE"
  for entry in "${ARCHIVES[@]}"; do
    read -r name url _ <<< "$entry"
    [ -f "$ARCHIVE/$name" ] && continue
    if [ "$DRY_RUN" = 1 ]; then
      echo "+ curl -fL -o $ARCHIVE/$name.part $url && mv $ARCHIVE/$name.part $ARCHIVE/$name"
    elif ! curl -fL --retry 2 -o "$ARCHIVE/$name.part" "$url"; then
      echo "prepare.sh: could not download $url (no network?): fetch the official archives elsewhere and pass --archive DIR" >&2
      exit 1
    else
      mv "$ARCHIVE/$name.part" "$ARCHIVE/$name"
    fi
  done
elif [ ! -d "$ARCHIVE" ]; then
  echo "prepare.sh: --archive $ARCHIVE is not a directory (it should hold the official archives or what they unpack to)" >&2
  exit 1
fi

# every official archive found under its name: the recorded checksum checked (unless --no-checksum),
# and the SHA-256 of what was used printed and kept in OUT/archives.sha256
if [ "$DRY_RUN" = 0 ]; then
  mkdir -p "$OUT"
  : > "$OUT/archives.sha256"
  for entry in "${ARCHIVES[@]}"; do
    read -r name url sum <<< "$entry"
    file="$ARCHIVE/$name"
    if [ ! -f "$file" ]; then
      echo "[prepare] $name: not in $ARCHIVE under its official name, so not checked (its files are looked for inside any archive there)"
      continue
    fi
    sha=$(sha256sum "$file" | cut -d' ' -f1)
    echo "$sha  $file" >> "$OUT/archives.sha256"
    if [ "$sum" = - ]; then
      echo "[prepare] $name: SHA-256 $sha (no checksum is recorded for it)"
    elif [ "$CHECKSUM" = 0 ]; then
      echo "[prepare] $name: SHA-256 $sha (recorded ${sum%%:*} not checked: --no-checksum)"
    else
      algo=${sum%%:*}
      if [ "$algo" = sha256 ]; then got=$sha; else got=$("${algo}sum" "$file" | cut -d' ' -f1); fi
      if [ "$got" != "${sum#*:}" ]; then
        echo "prepare.sh: $file has ${algo} $got, not the recorded ${sum#*:}: a damaged or different download" \
             "(remove it and run again, or pass --no-checksum to use it anyway)" >&2
        exit 1
      fi
      echo "[prepare] $name: ${algo} as recorded; SHA-256 $sha"
    fi
  done
fi

if [ -f "$OUT/text/counts.json" ]; then
  echo "[prepare] $OUT/text exists (remove it to redo the protocol)"
else
  run fsd-benchmark-corpus "$CORPUS" --archive "$ARCHIVE" --out "$OUT/text" --workers "$WORKERS"
fi
# segmentation and binarization; fsd-prepare-corpus reuses its output when inputs and options match
run fsd-prepare-corpus -s en -t de --train-prefix "$OUT/text/train" --valid-prefix "$OUT/text/valid" \
  --test-prefix "$OUT/text/test" --bpe sentencepiece --spm-model-type unigram --vocab-size "$VOCAB" \
  --workers "$WORKERS" --out "$OUT/data"
