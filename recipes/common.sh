# What every recipe's prepare.sh and run.sh share; sourced by them, not run.
#
# prepare.sh sets CORPUS, ARCHIVES (one "name URL checksum" line per official archive, checksum
# "algo:value" or "-") and HELP_LINES, then calls parse_prepare_options "$@", claim_workdir
# "$CORPUS" prepare.sh, fetch_archives and check_archives. run.sh sets RECIPE, STAGES and
# HELP_LINES, then calls parse_run_options "$@", check_run_workdir, check_prepared_data and
# device_flags, and runs its stages with run / wanted / stage, evaluates the rows that finished
# (finished, say_unfinished) and writes the table.
#
# What a work dir records (OUT/workdir.txt): the recipe that made it, and whether its runs are
# --smoke ones; another recipe's work dir, or a --smoke run's for a full one (or the reverse), is
# refused before anything is written. Each stage records its command in its .done (written when
# it finishes; .done.begun while it runs), with the content digest of the data it reads and the
# record of each earlier stage it uses: a stage finished or begun with other settings is refused,
# naming what differs.

COMMON_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# print the command, quoted as a shell reads it; run it unless --dry-run. fairseq-train's output
# gains a line after each epoch: the time taken and about how long its budget still needs
# (follow_training.py; STAGE_TAG names the stage, as stage sets it)
run() {
  echo "+ $(printf '%q ' "$@")"
  [ "$DRY_RUN" = 1 ] && return 0
  if [ "$1" != fairseq-train ]; then "$@"; return; fi
  local arg previous="" budget=(--max-epoch 0 --max-update 0)
  for arg in "$@"; do
    case "$previous" in --max-epoch) budget[1]="$arg" ;; --max-update) budget[3]="$arg" ;; esac
    previous="$arg"
  done
  # unbuffered: fairseq logs to stdout, which a pipe would hold back for minutes
  PYTHONUNBUFFERED=1 "$@" 2>&1 | python -u "$COMMON_DIR/follow_training.py" "${budget[@]}" --tag "${STAGE_TAG:-[train]}"
}

usage() { sed -n "2,${HELP_LINES}p" "$0" | sed 's/^# \{0,1\}//'; }

# -- prepare.sh -------------------------------------------------------------------------------

# --out DIR, --archive PATH (a directory of the official archives or what they unpack to; a recipe
# with one archive also takes the file), --no-checksum, --vocab-size N, --workers N, --dry-run
parse_prepare_options() {
  OUT="work/$CORPUS"
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
      -h|--help) usage; exit 0 ;;
      *) echo "prepare.sh: unknown option '$1'; valid: --out DIR, --archive PATH, --no-checksum, --vocab-size N," \
              "--workers N, --dry-run" >&2; exit 2 ;;
    esac
  done
  if [ -n "$ARCHIVE" ] && [ ! -e "$ARCHIVE" ]; then
    echo "prepare.sh: --archive $ARCHIVE does not exist" >&2
    exit 1
  fi
  if [ -f "$ARCHIVE" ] && [ "${#ARCHIVES[@]}" != 1 ]; then
    echo "prepare.sh: --archive $ARCHIVE is a file; this recipe reads ${#ARCHIVES[@]} archives: pass the" \
         "directory that holds them (or what they unpack to)" >&2
    exit 1
  fi
}

# -- the work dir's record --------------------------------------------------------------------

WORKDIR_RECORD=workdir.txt

record_value() {  # KEY: its value in OUT's record, if any
  [ -f "$OUT/$WORKDIR_RECORD" ] || return 0
  sed -n "s/^$1 //p" "$OUT/$WORKDIR_RECORD" | head -n 1
}

set_record() {  # KEY VALUE: written into OUT's record (not on a dry run)
  [ "$DRY_RUN" = 1 ] && return 0
  mkdir -p "$OUT"
  local file="$OUT/$WORKDIR_RECORD"
  {
    echo "# what made this work dir (recipes/common.sh): the recipe, and whether its runs are --smoke ones"
    if [ -f "$file" ]; then grep -v -e "^$1 " -e '^#' "$file" || true; fi
    echo "$1 $2"
  } > "$file.tmp"
  mv "$file.tmp" "$file"
}

# The recipe that made OUT: recorded, else (a work dir of an earlier version) the corpus its text
# was made for; nothing for a new directory.
workdir_recipe() {
  local found
  found=$(record_value recipe)
  if [ -z "$found" ] && [ -f "$OUT/text/counts.json" ]; then
    found=$(python -c 'import json, sys; print(json.load(open(sys.argv[1])).get("corpus", ""))' \
            "$OUT/text/counts.json" 2>/dev/null || true)
  fi
  echo "$found"
}

# RECIPE SCRIPT: refuse OUT if another recipe made it (before anything is written), else record
# that this one did.
claim_workdir() {
  local found
  found=$(workdir_recipe)
  if [ -n "$found" ] && [ "$found" != "$1" ]; then
    echo "$2: --out $OUT is a work dir of the recipe $found, not $1: its data, runs and results are $found's;" \
         "give $1 a --out of its own" >&2
    exit 1
  fi
  [ -n "$(record_value recipe)" ] || set_record recipe "$1"
}

# Without --archive: each official archive downloaded into OUT/orig (kept; a rerun downloads only
# what is missing), and ARCHIVE set to that directory.
fetch_archives() {
  [ -n "$ARCHIVE" ] && return 0
  ARCHIVE="$OUT/orig"
  run mkdir -p "$ARCHIVE"
  local entry name url
  for entry in "${ARCHIVES[@]}"; do
    read -r name url _ <<< "$entry"
    [ -f "$ARCHIVE/$name" ] && continue
    if [ "$DRY_RUN" = 1 ]; then
      echo "+ curl -fL -o $ARCHIVE/$name.part $url && mv $ARCHIVE/$name.part $ARCHIVE/$name"
    elif ! curl -fL --retry 2 -o "$ARCHIVE/$name.part" "$url"; then
      echo "prepare.sh: could not download $url (no network?): fetch the official archives elsewhere and" \
           "pass --archive PATH" >&2
      exit 1
    else
      mv "$ARCHIVE/$name.part" "$ARCHIVE/$name"
    fi
  done
}

# Every official archive found under its name: its recorded checksum checked (unless
# --no-checksum) and the SHA-256 of what was used printed and kept in OUT/archives.sha256.
check_archives() {
  [ "$DRY_RUN" = 1 ] && return 0
  mkdir -p "$OUT"
  : > "$OUT/archives.sha256"
  local entry name url sum file sha algo got
  for entry in "${ARCHIVES[@]}"; do
    read -r name url sum <<< "$entry"
    if [ -f "$ARCHIVE" ]; then file="$ARCHIVE"; else file="$ARCHIVE/$name"; fi
    if [ ! -f "$file" ]; then
      echo "[prepare] $name: not in $ARCHIVE under its official name, so not checked (its files are looked" \
           "for inside any archive there)"
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
}

# The protocol's text (fsd-benchmark-corpus, kept once made), then segmentation and binarization
# (fsd-prepare-corpus, which reuses its output when inputs and options match); arguments: the source
# and target language, then fsd-prepare-corpus's segmentation flags.
prepare_text_and_data() {
  local src="$1" tgt="$2"; shift 2
  if [ -f "$OUT/text/counts.json" ]; then
    echo "[prepare] $OUT/text exists (remove it to redo the protocol)"
  else
    run fsd-benchmark-corpus "$CORPUS" --archive "$ARCHIVE" --out "$OUT/text" --workers "$WORKERS"
  fi
  run fsd-prepare-corpus -s "$src" -t "$tgt" --train-prefix "$OUT/text/train" --valid-prefix "$OUT/text/valid" \
    --test-prefix "$OUT/text/test" "$@" --workers "$WORKERS" --out "$OUT/data"
}

# The official WMT archives both WMT en-de recipes read besides their News Commentary release:
# name, URL (those of fairseq's prepare-wmt14en2de.sh) and the checksum another project records
# for it; none has been verified here (no network where these recipes were written).
WMT_ARCHIVES=(
  "training-parallel-europarl-v7.tgz http://statmt.org/wmt13/training-parallel-europarl-v7.tgz sha256:0224c7c710c8a063dfd893b0cc0830202d61f4c75c17eb8e31836103d27d96e7"
  "training-parallel-commoncrawl.tgz http://statmt.org/wmt13/training-parallel-commoncrawl.tgz sha256:c7a74e2ea01ac6c920123108627e35278d4ccb5701e15428ffa34de86fa3a9e5"
  "dev.tgz http://data.statmt.org/wmt17/translation-task/dev.tgz sha256:9d5ff04a28496b7796904ea65e50e3837bab14dbdca88b1e063105f17513dca9"
  "test-full.tgz http://statmt.org/wmt14/test-full.tgz md5:a8cd784e006feb32ac6f3d9ec7eb389a"
)

# -- run.sh -----------------------------------------------------------------------------------

# ARGS...: one of the options every run.sh takes (--out DIR, --gpus N, --no-fp16, --stage NAME,
# --dry-run, --smoke, -h), set, with TAKEN the number of words it used; fails for any other
run_option() {
  TAKEN=2
  case "$1" in
    --out) OUT="$2" ;;
    --gpus) GPUS="$2" ;;
    --no-fp16) FP16=0; TAKEN=1 ;;
    --stage) STAGE="$2" ;;
    --dry-run) DRY_RUN=1; TAKEN=1 ;;
    --smoke) SMOKE=1; TAKEN=1 ;;
    -h|--help) usage; exit 0 ;;
    *) return 1 ;;
  esac
}

# --out DIR, --gpus N, --no-fp16, --stage NAME (one of STAGES), --rows FILE, --dry-run, --smoke
parse_run_options() {
  OUT="work/$RECIPE"
  GPUS=0
  FP16=1
  STAGE=all
  DRY_RUN=0
  SMOKE=0
  ROWS="$HERE/rows.tsv"
  while [ $# -gt 0 ]; do
    case "$1" in
      --rows) ROWS="$2"; shift 2 ;;
      *) if run_option "$@"; then shift "$TAKEN"; else
           echo "run.sh: unknown option '$1'; valid: --out DIR, --gpus N, --no-fp16, --stage NAME, --rows FILE," \
                "--dry-run, --smoke" >&2; exit 2
         fi ;;
    esac
  done
  case " $STAGES all " in
    *" $STAGE "*) ;;
    *) echo "run.sh: unknown --stage '$STAGE'; valid: $STAGES (or all)" >&2; exit 2 ;;
  esac
  case "$GPUS" in
    ''|*[!0-9]*) echo "run.sh: --gpus must be a number of GPUs (0: the CPU), got '$GPUS'" >&2; exit 2 ;;
  esac
  if [ ! -f "$ROWS" ]; then echo "run.sh: --rows $ROWS does not exist" >&2; exit 2; fi
  check_rows
  DATA="$OUT/data/bin"
  TEXT="$OUT/text"
  RUNS="$OUT/runs"
  PLUGIN="$(python -c 'import fairseq_distill, os; print(os.path.dirname(fairseq_distill.__file__))' 2>/dev/null \
            || echo fairseq_distill)"
}

# OUT is this recipe's, and its runs are of this kind (--smoke or full), or it has none yet: a
# full run would take a --smoke run's toy stages as done, and a --smoke run would write toy
# models over a full run's. Checked before anything is written; records the kind.
check_run_workdir() {
  claim_workdir "$RECIPE" run.sh
  local kind=full other found made=() path
  [ "$SMOKE" = 1 ] && kind=smoke
  found=$(record_value runs)
  for path in "$RUNS" "$OUT/cache" "$OUT"/seqkd* "$OUT/eval" "$OUT/results.md" "$OUT/results.json"; do
    [ -e "$path" ] && made+=("$path")
  done
  if [ -n "$found" ] && [ "$found" != "$kind" ] && [ "${#made[@]}" -gt 0 ]; then
    other="a full run's"; [ "$found" = smoke ] && other="a --smoke run's"
    echo "run.sh: --out $OUT holds $other models and results; this run is $([ "$kind" = smoke ] && echo "a --smoke" \
         || echo "a full") one, which would take them as its own. Use another --out (with its own prepare.sh," \
         "or a copy of $OUT/data and $OUT/text), or remove them to start again on the same data: ${made[*]}" >&2
    exit 1
  fi
  [ "$found" = "$kind" ] || set_record runs "$kind"
}

check_prepared_data() {
  if [ "$DRY_RUN" = 0 ] && [ ! -f "$DATA/fairseq_distill.json" ]; then
    echo "run.sh: no prepared data in $DATA: run recipes/$RECIPE/prepare.sh --out $OUT first" >&2
    exit 1
  fi
  DATA_DIGEST=""
  [ "$DRY_RUN" = 1 ] || DATA_DIGEST=$(data_digest "$DATA")
}

# DEVICE: fairseq-train's device flags (data-parallel on --gpus N with --fp16 unless --no-fp16; the
# CPU without GPUs or with --smoke); TOOL_DEVICE: the same choice for fsd-cache-teacher.
device_flags() {
  TOOL_DEVICE=()
  if [ "$SMOKE" = 1 ] || [ "$GPUS" = 0 ]; then
    DEVICE=(--cpu)
    TOOL_DEVICE=(--cpu)
  else
    DEVICE=(--distributed-world-size "$GPUS")
    [ "$FP16" = 1 ] && DEVICE+=(--fp16)
  fi
  return 0
}

# fsd-seqkd: on --gpus N > 1 one shard per GPU (each process sees one GPU), run side by side, then
# merged; otherwise in one go, or as the one shard or merge that --num-shards in the arguments asks.
# Arguments: fsd-seqkd's flags (--data, --teacher, --out, decoding).
seqkd() {
  if [ "$SMOKE" = 1 ] || [ "$GPUS" -le 1 ] || [[ " $* " == *" --num-shards "* ]]; then
    run fsd-seqkd "$@"
    return
  fi
  local out="" args=("$@") i pids=()
  while [ $# -gt 0 ]; do [ "$1" = --out ] && out="$2"; shift; done
  for (( i = 0; i < GPUS; i++ )); do  # printed here, in order; run side by side
    echo "+ $(printf '%q ' env CUDA_VISIBLE_DEVICES="$i" fsd-seqkd "${args[@]}" --num-shards "$GPUS" --shard-id "$i") &"
    [ "$DRY_RUN" = 1 ] && continue
    env CUDA_VISIBLE_DEVICES="$i" fsd-seqkd "${args[@]}" --num-shards "$GPUS" --shard-id "$i" &
    pids+=($!)
  done
  for i in ${pids[@]+"${pids[@]}"}; do wait "$i" || { echo "run.sh: a seq-KD shard failed (its log: $out.work)" >&2; exit 1; }; done
  run fsd-seqkd "${args[@]}" --num-shards "$GPUS" --merge
}

rows() { grep -v '^#' "$ROWS" | grep -v '^$'; }

# What a row's data column may say: the recipe's ROW_DATA (an extended glob), described by
# ROW_DATA_HELP; the criterions fairseq_distill registers and stock label-smoothed CE.
shopt -s extglob
ROW_DATA='@(original|seqkd)'
ROW_DATA_HELP="original, seqkd"
ROW_CRITERIA="label_smoothed_cross_entropy word_kd pkd ckd alp_kd a2d distill"

# Every row of $ROWS, checked when run.sh starts (and in --dry-run), before anything trains: seven
# tab-separated columns, a known data value and criterion, numbers where numbers go, names unique.
# A typo would otherwise train on the wrong data, or fail at the students stage in fairseq's parser.
check_rows() {
  local n=0 line name layers data criterion options heads paper seen=" " where
  while IFS= read -r line || [ -n "$line" ]; do
    n=$((n + 1))
    case "$line" in ''|'#'*) continue ;; esac
    where="run.sh: --rows $ROWS line $n"
    local cols
    cols=$(printf '%s' "$line" | awk -F'\t' '{print NF}')
    if [ "$cols" -ne 7 ]; then
      echo "$where has $cols tab-separated column(s), not 7 (name, layers, data, criterion, options, heads," \
           "paper_bleu; '-' for no options); are its columns separated by spaces instead of tabs?" >&2
      exit 2
    fi
    IFS=$'\t' read -r name layers data criterion options heads paper <<< "$line"
    case "$name" in ''|*[!A-Za-z0-9_.+-]*) echo "$where: name '$name': letters, digits and . _ + - only" >&2; exit 2 ;; esac
    case "$seen" in *" $name "*) echo "$where: the name '$name' is used by an earlier row" >&2; exit 2 ;; esac
    seen="$seen$name "
    case "$layers" in ''|*[!0-9+]*|+*|*+) echo "$where ($name): layers '$layers': a number per side, e.g. 3 or 48+6" >&2; exit 2 ;; esac
    # shellcheck disable=SC2254
    case "$data" in $ROW_DATA) ;; *) echo "$where ($name): data '$data'; valid: $ROW_DATA_HELP" >&2; exit 2 ;; esac
    case " $ROW_CRITERIA " in *" $criterion "*) ;; *)
      echo "$where ($name): criterion '$criterion'; valid: ${ROW_CRITERIA// /, }" >&2; exit 2 ;; esac
    case "$heads" in ''|*[!0-9]*) echo "$where ($name): heads '$heads': a number" >&2; exit 2 ;; esac
  done < "$ROWS"
  return 0
}
wanted() { [ "$STAGE" = all ] || [ "$STAGE" = "$1" ]; }

# -- each stage's record --------------------------------------------------------------------------

# TEXT: with the work dir written $OUT and the plugin's directory $PLUGIN (a moved work dir
# keeps its records)
portable() {
  local text="$1"
  text=${text//"$(printf '%q' "$PLUGIN")"/\$PLUGIN}
  text=${text//"$(printf '%q' "$OUT")"/\$OUT}
  printf '%s' "$text"
}

# PATH OWN_MARKER: the .done of the earlier stage that made PATH (a file stage's PATH.done, or the
# .done of PATH's directory), if any and not of the stage's own directory
stage_marker_of() {
  local dir="$1"
  if [ -f "$1.done" ] && [ "$1.done" != "$2" ]; then echo "$1.done"; return 0; fi
  [ -d "$dir" ] || dir=$(dirname "$1")
  if [ -f "$dir/.done" ] && [ "$dir" != "$(dirname "$2")" ]; then echo "$dir/.done"; return 0; fi
  return 1
}

data_digest() {  # DIR: SHA-256 of its dictionaries and binarized files, by name and content
  (cd "$1" && find . -maxdepth 1 -type f \( -name 'dict.*.txt' -o -name '*.bin' -o -name '*.idx' \) | LC_ALL=C sort \
     | xargs -d '\n' sha256sum | sha256sum | cut -d' ' -f1)
}

# MARKER CMD...: the stage's record. "command:" its command line; "settings:" the same without
# the device flags (--cpu, --fp16, --distributed-world-size N and --update-freq N, which --gpus
# sets) and the sharing out (--num-shards N, --shard-id I, --merge: the shards together make what
# one run makes); "data DIR:" the content digest of the prepared data it reads; "from MARKER:" the digest
# of the record of each earlier stage whose output it reads. All but "command:" are compared.
stage_record() {
  local marker="$1" arg skip=0 settings=() dep
  shift
  echo "command: $(portable "$(printf '%q ' "$@")")"
  for arg in "$@"; do
    if [ "$skip" = 1 ]; then skip=0; continue; fi
    case "$arg" in
      --cpu|--fp16|--merge) continue ;;
      --distributed-world-size|--update-freq|--num-shards|--shard-id) skip=1; continue ;;
    esac
    settings+=("$arg")
  done
  echo "settings: $(portable "$(printf '%q ' "${settings[@]}")")"
  for arg in "$@"; do
    case "$arg" in "$OUT"/*) ;; *) continue ;; esac
    if [ "$arg" = "$DATA" ]; then
      echo "data $(portable "$arg"): $DATA_DIGEST"
    elif dep=$(stage_marker_of "$arg" "$marker"); then
      echo "from $(portable "$dep"): $(sha256sum < "$dep" | cut -d' ' -f1)"
    fi
  done
}

words() { tr ' ' '\n' <<< "${1#settings: }" | grep -v '^$' | sort -u || true; }

# FILE RECORD WHAT STATE: FILE's record (a .done or .done.begun) is RECORD's, or what differs is
# printed, naming the stage (WHAT) and how to train it again
same_settings() {
  local before now then_settings now_settings
  before=$(grep -v '^command: ' "$1" || true)
  now=$(printf '%s\n' "$2" | grep -v '^command: ')
  [ "$before" = "$now" ] && return 0
  {
    echo "run.sh: $3 $4 with other settings than this run's (recorded in $1):"
    [ -n "$before" ] || echo "  it records none (an earlier version's record)"
    then_settings=$(grep '^settings: ' <<< "$before" || true)
    now_settings=$(grep '^settings: ' <<< "$now")
    comm -23 <(words "$then_settings") <(words "$now_settings") | sed 's/^/  then: /'
    comm -13 <(words "$then_settings") <(words "$now_settings") | sed 's/^/  now: /'
    # the data it read and the earlier stages it used
    comm -23 <(grep -v '^settings: ' <<< "$before" | sort) <(grep -v '^settings: ' <<< "$now" | sort) | sed 's/^/  then: /'
    comm -13 <(grep -v '^settings: ' <<< "$before" | sort) <(grep -v '^settings: ' <<< "$now" | sort) | sed 's/^/  now: /'
    echo "  its results would not match this run's settings: delete $(dirname "$1") to train it again with" \
         "them, or run with the settings it was made with"
  } >&2
  return 1
}

# WHAT MARKER CMD...: run CMD as the stage that MARKER marks finished (MARKER.begun while it runs);
# a stage finished with the same settings is kept ("WHAT done"); one finished or begun with other
# settings is refused (same_settings). A dry run prints CMD. FIRST_ONLY=N: CMD's last N arguments
# (the flags a training starts from) are recorded but left out once MARKER's directory holds a
# checkpoint_last.pt of its own (a resume goes on from that).
stage() {
  local what="$1" marker="$2" record first_only=${FIRST_ONLY:-0}
  shift 2
  if [ "$DRY_RUN" = 1 ]; then invoke "$@"; return 0; fi
  record=$(stage_record "$marker" "$@")
  if [ -f "$marker" ]; then
    same_settings "$marker" "$record" "$what" finished || exit 1
    echo "$what done"
    return 0
  fi
  if [ -f "$marker.begun" ]; then same_settings "$marker.begun" "$record" "$what" began || exit 1; fi
  mkdir -p "$(dirname "$marker")"
  printf '%s\n' "$record" > "$marker.begun"
  if [ "$first_only" -gt 0 ] && [ -f "$(dirname "$marker")/checkpoint_last.pt" ]; then
    set -- "${@:1:$(($# - first_only))}"
  fi
  STAGE_TAG="$what" invoke "$@"
  mkdir -p "$(dirname "$marker")"  # a tool may have replaced the directory (fsd-seqkd switches its --out in)
  printf '%s\n' "$record" > "$marker.tmp"
  mv "$marker.tmp" "$marker"
  rm -f "$marker.begun"
}

invoke() { if declare -F "$1" > /dev/null; then "$@"; else run "$@"; fi; }  # a recipe's function, or run

# NAME: the row (or the teacher) trained to the end; a dry run takes every row as finished
finished() { [ "$DRY_RUN" = 1 ] || [ -f "$RUNS/$1/.done" ]; }

say_unfinished() {  # STAGE NAME...: the rows that stage left out, by name
  local stage="$1"
  shift
  [ $# -eq 0 ] || echo "[$stage] not finished, not evaluated: $*"
}
