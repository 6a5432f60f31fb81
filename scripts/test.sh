#!/usr/bin/env bash
# The whole test suite from a fresh clone: install what it needs, then run pytest.
# Extra arguments go to pytest (e.g. scripts/test.sh -k hostlist).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Lint and format first: they take a second and catch what a reviewer would.
.venv/bin/ruff check .
.venv/bin/ruff format --check .
# Types of the package (pyproject.toml [tool.mypy]; the pure core strictly): about 10 s.
.venv/bin/mypy
exec .venv/bin/python -m pytest "$@"
