#!/usr/bin/env bash
# IWSLT'14 German->English as the CKD, A2D and flexible-depth papers used it (fairseq's
# prepare-iwslt14.sh protocol): download (or --archive), checksum, the protocol's cleaning,
# Moses tokenisation and lowercasing (fsd-benchmark-corpus), then a joint BPE of 10,000 merges
# and binarization with a joined dictionary (fsd-prepare-corpus). Each stage is skipped when
# its output exists; every stage counts its lines and stops on a mismatch.
#
#   recipes/iwslt14_de_en/prepare.sh [--out DIR] [--archive de-en.tgz|DIR] [--no-checksum] [--dry-run]
set -euo pipefail

URL=http://dl.fbaipublicfiles.com/fairseq/data/iwslt14/de-en.tgz
# the archive's MD5 as another project's preparation script records it; not verified here (no
# network where this recipe was written): a mismatch stops, --no-checksum skips the check
MD5=10936dfdf616504ddbd844e91b94ef4a
BPE_MERGES=10000

OUT=work/iwslt14_de_en
ARCHIVE=""
CHECKSUM=1
DRY_RUN=0
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT="$2"; shift 2 ;;
    --archive) ARCHIVE="$2"; shift 2 ;;
    --no-checksum) CHECKSUM=0; shift ;;
    --dry-run) DRY_RUN=1; shift ;;
    -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "prepare.sh: unknown option '$1'; valid: --out DIR, --archive PATH, --no-checksum, --dry-run" >&2; exit 2 ;;
  esac
done

run() {  # print the command, quoted as a shell reads it; run it unless --dry-run
  echo "+ $(printf '%q ' "$@")"
  [ "$DRY_RUN" = 1 ] || "$@"
}

if [ -z "$ARCHIVE" ]; then
  ARCHIVE="$OUT/orig/de-en.tgz"
  if [ ! -f "$ARCHIVE" ]; then
    run mkdir -p "$OUT/orig"
    if [ "$DRY_RUN" = 1 ]; then
      echo "+ curl -fL -o $ARCHIVE.part $URL && mv $ARCHIVE.part $ARCHIVE"
    elif ! curl -fL --retry 2 -o "$ARCHIVE.part" "$URL"; then
      echo "prepare.sh: could not download $URL (no network?): fetch de-en.tgz elsewhere and pass --archive PATH" >&2
      exit 1
    else
      mv "$ARCHIVE.part" "$ARCHIVE"
    fi
  fi
elif [ ! -e "$ARCHIVE" ]; then
  echo "prepare.sh: --archive $ARCHIVE does not exist" >&2
  exit 1
fi

if [ "$CHECKSUM" = 1 ] && [ -f "$ARCHIVE" ] && [ "$DRY_RUN" = 0 ]; then
  got=$(md5sum "$ARCHIVE" | cut -d' ' -f1)
  if [ "$got" != "$MD5" ]; then
    echo "prepare.sh: $ARCHIVE has MD5 $got, not the recorded $MD5: a damaged or different download" \
         "(remove it and run again, or pass --no-checksum to use it anyway)" >&2
    exit 1
  fi
  echo "[prepare] $ARCHIVE: MD5 $got as recorded"
fi

if [ -f "$OUT/text/counts.json" ]; then
  echo "[prepare] $OUT/text exists (remove it to redo the protocol)"
else
  run fsd-benchmark-corpus iwslt14_de_en --archive "$ARCHIVE" --out "$OUT/text"
fi
# segmentation and binarization; fsd-prepare-corpus reuses its output when inputs and options match
run fsd-prepare-corpus -s de -t en --train-prefix "$OUT/text/train" --valid-prefix "$OUT/text/valid" \
  --test-prefix "$OUT/text/test" --bpe subword_nmt --vocab-size "$BPE_MERGES" --out "$OUT/data"
