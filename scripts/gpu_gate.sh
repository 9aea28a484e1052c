#!/usr/bin/env bash
# The gate on a real GPU (the device tool's H200), from the repo root: launches of `transformers serve` with a
# GPU-bound random-weight model on three builds (unchanged, 5% and 10% slower: gpu/slowdown/sitecustomize.py),
# written to $OUT/launches.json for `python scripts/gpu_gate.py --replay`. Wheels the machine lacks go in .whl/
# (docs/gpu.md lists them).
set -uo pipefail
OUT=${OUT:-$(mktemp -d)}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || exit 1
fi
# The slowdown hook first (it acts only where a build sets GLM5_TEST_SLOWDOWN), then the carried wheels, then us.
export PYTHONPATH=$PWD/gpu/slowdown:/tmp/site:$PWD
nvidia-smi --query-gpu=name,memory.used,power.draw,driver_version --format=csv
python3 -c "import transformers, torch; print('transformers', transformers.__version__, 'torch', torch.__version__)"
python3 scripts/gpu_gate.py "$OUT" --minutes "${MINUTES:-6.5}" 2>&1 | tee "$OUT/gate.log"
tail -40 /tmp/glm5-gpu-logs/*.log 2>/dev/null | tail -60 > "$OUT/last-server-log.txt"
if pgrep -af "transformers serve"; then echo "LEFTOVER PROCESSES"; exit 1; fi
echo "no process left"
