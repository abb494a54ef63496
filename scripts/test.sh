#!/usr/bin/env bash
# Set up the environment if needed (scripts/setup_env.sh), then run the tests; extra
# arguments go to pytest. Tiers (pytest.ini, tests/conftest.py):
#   scripts/test.sh fast [ARGS]   the fast tier: unit tests and tiny in-process runs (-m "not slow")
#   scripts/test.sh [all] [ARGS]  the fast tier, then the slow one (-m slow: fairseq-train,
#                                 fairseq-generate and fsd-* runs in subprocesses); each test once,
#                                 and a failing fast tier ends the run before the slow one
# Both tiers run on one pytest-xdist worker per core (TEST_WORKERS=N to choose, 0 for none),
# each test file on one worker (its module fixtures are made once), one thread per worker
# (tests/conftest.py): most of their time is Python, process start-up and tiny models, which one
# core runs as fast as two.
# A tier that selects no tests fails, unless ARGS narrowed the selection and the other tier ran tests.
set -euo pipefail
cd "$(dirname "$0")/.."
tier=all
case "${1:-}" in fast|all) tier=$1; shift ;; esac
bash scripts/setup_env.sh
# The data and teachers the session fixtures make are made once for both tiers and every worker
# (tests/conftest.py: shared_build), in a folder of this run's own, removed at the end.
FSD_TEST_SHARED=$(mktemp -d "${TMPDIR:-/tmp}/fsd-test-shared.XXXXXX")
export FSD_TEST_SHARED
trap 'rm -rf "$FSD_TEST_SHARED"' EXIT

# runs one tier; sets rc to pytest's exit code
run_tier() {
  local name=$1 expr=$2; shift 2
  echo "[test] $name tier: pytest -m \"$expr\" $*"
  rc=0
  .venv/bin/python -m pytest -q -p no:cacheprovider -m "$expr" "$@" || rc=$?
}

run_tier fast "not slow" -n "${TEST_WORKERS:-auto}" --dist loadfile "$@"
fast=$rc
if [ "$tier" = fast ]; then
  [ "$fast" -eq 5 ] && echo "[test] the fast tier selected no tests"
  exit "$fast"
fi
if [ "$fast" -ne 0 ] && [ "$fast" -ne 5 ]; then
  echo "[test] the fast tier failed (exit $fast); the slow tier was not run"
  exit "$fast"
fi
# --durations: the slowest tests, to keep the whole suite under 30 minutes
run_tier slow "slow" -n "${TEST_WORKERS:-auto}" --dist loadfile --durations=15 "$@"
slow=$rc
if [ "$slow" -ne 0 ] && [ "$slow" -ne 5 ]; then
  exit "$slow"
fi
if [ "$fast" -eq 5 ] && [ "$slow" -eq 5 ]; then
  echo "[test] neither tier selected any test"
  exit 5
fi
for t in fast slow; do
  if [ "${!t}" -eq 5 ]; then
    if [ "$#" -eq 0 ]; then
      echo "[test] the $t tier has no tests at all: the markers are lost (pytest.ini, tests/conftest.py)"
      exit 5
    fi
    echo "[test] the $t tier: no tests among those selected ($*)"
  fi
done
echo "[test] both tiers passed"
