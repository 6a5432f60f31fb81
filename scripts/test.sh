#!/usr/bin/env bash
# The whole test suite from a fresh clone: install what it needs, then run pytest.
# Extra arguments go to pytest (e.g. scripts/test.sh -k hostlist).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check jeanzay_kit tests train.py 2>/dev/null || .venv/bin/ruff check jeanzay_kit tests
exec .venv/bin/python -m pytest "$@"
