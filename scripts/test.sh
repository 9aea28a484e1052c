#!/usr/bin/env bash
# The plugin's own checks, from nothing: a venv with the project and its test extra, then lint,
# types and the test suite. CI runs exactly this (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${GLM5_VENV:-.venv}
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
"$VENV/bin/python" -m pip install -q -e '.[test]'
"$VENV/bin/ruff" check .
"$VENV/bin/mypy"
exec "$VENV/bin/pytest" tests "$@"
