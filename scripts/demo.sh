#!/usr/bin/env bash
# The demo: recipes/own/run.sh, the recipe for your own data and teacher, on the shipped Multi30k
# de->en with no teacher given: it trains the small teacher (--teacher-size small: 3+3, d = 128,
# 5 epochs), makes seq-KD data (MBR over its 8 best) and its top-8 cache, trains a 2+2, d = 64
# student on both for 5 epochs (--student-epochs 5: half the recipe's default, to keep the demo
# near 25 minutes on 2 CPU cores), exports it to CTranslate2 int8 and writes the report card.
# OUT/results.md says what came out and how to translate a file with it. Rerunning keeps the
# finished stages. Extra arguments go to the recipe (e.g. --student base, --dry-run).
#   DEMO_WORKDIR=dir   where everything goes (default work/own-demo)
#   DEMO_SETUP=0       use the environment as it is (no scripts/setup_env.sh): the tests' dry run
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${DEMO_SETUP:-1}" != 0 ]; then
  bash scripts/setup_env.sh
  export PATH="$PWD/.venv/bin:$PATH"
fi
exec bash recipes/own/run.sh -s de -t en --train data/multi30k/train --valid data/multi30k/val \
  --test data/multi30k/test_2016_flickr --teacher-size small --student-epochs 5 --out "${DEMO_WORKDIR:-work/own-demo}" "$@"
