#!/usr/bin/env bash
# The main job. First the whole GLM-5 / SM120 suite rehearsed on the emulator (any machine, about 3 minutes on
# 2 cores), then the real thing: `pytest -m sm120` against SGLang on the GPUs, whatever the rehearsal said. On a
# machine without SM120 GPUs the real run skips every test and says what it found and what to pass instead.
# Extra arguments go to both pytest runs (e.g. -k tp8, --update-baselines, --glm5-report out.json).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${GLM5_VENV:-.venv}
if grep -qs "include-system-site-packages = true" "$VENV/pyvenv.cfg"; then
  # Made by an older nightly.sh: the system's pytest shadowed the venv's, so it is made again on its own.
  echo "$(basename "$0"): $VENV shares the system's site-packages; making it again without them"
  rm -rf "$VENV"
fi
if [ ! -x "$VENV/bin/python" ]; then
  # A venv of its own: what the system Python holds (an older pytest, say) never shadows the plugin's. SGLang is
  # not needed here: the plugin runs it from the first Python that imports it (GLM5_SGLANG_PYTHON, this venv,
  # then python3 on PATH) or from a [build.NAME] python.
  python3 -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
"$VENV/bin/python" -m pip install -q -e .
echo "== 1/2 rehearsal: pytest -m sm120 --glm5-sim"
set +e
"$VENV/bin/python" -m pytest -m sm120 --glm5-sim "$@"
rehearsal=$?
echo "== 2/2 the real suite: pytest -m sm120 (the rehearsal exited $rehearsal)"
"$VENV/bin/python" -m pytest -m sm120 -rs "$@"
rc=$?
set -e
# Exit 5 (nothing ran) only means this machine has no SM120 GPUs; the skip reasons above say so.
[ "$rc" = 5 ] && rc=0
if [ "$rehearsal" != 0 ] && [ "$rc" = 0 ]; then
  echo "nightly.sh: the real suite passed; the rehearsal on the emulator exited $rehearsal (see above): the plugin" \
       "or the suite may need a look before the next night"
fi
exit "$rc"
