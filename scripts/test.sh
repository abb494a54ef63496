#!/usr/bin/env bash
# Set up the environment if needed, then run the test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
exec .venv/bin/python -m pytest tests -q -p no:cacheprovider "$@"
