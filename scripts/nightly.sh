#!/usr/bin/env bash
# The main job. First the whole GLM-5 / SM120 suite rehearsed on the emulator (any machine, about 3 minutes on
# 2 cores), then the real thing: `pytest -m sm120` against SGLang on the GPUs. On a machine without SM120
# GPUs the real run skips every test and says what it found and what to pass instead.
# Extra arguments go to both pytest runs (e.g. -k tp8, --update-baselines, --glm5-report out.json).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${GLM5_VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
  # --system-site-packages: on the GPU box, the SGLang installed in the system Python stays importable.
  python3 -m venv --system-site-packages "$VENV"
fi
"$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
"$VENV/bin/python" -m pip install -q -e '.[nvml]'
echo "== 1/2 rehearsal: pytest -m sm120 --glm5-sim"
"$VENV/bin/python" -m pytest -m sm120 --glm5-sim "$@"
echo "== 2/2 the real suite: pytest -m sm120"
set +e
"$VENV/bin/python" -m pytest -m sm120 -rs "$@"
rc=$?
set -e
# Exit 5 (nothing ran) only means this machine has no SM120 GPUs; the skip reasons above say so.
[ "$rc" = 5 ] && rc=0
exit "$rc"
