#!/usr/bin/env bash
# The gate on a real GPU (the device tool's H200), from the repo root: launches of `transformers serve` with a
# GPU-bound random-weight model on three builds (unchanged, 5% and 10% slower: gpu/slowdown/sitecustomize.py).
#   PHASE=checks (default): a reference, then independent nightly checks run live until MINUTES are spent, written
#     to $OUT/launches.json; put that file in .gpu-state/ (carried) and the next call goes on from it.
#   CYCLE=base: every check an unchanged night (the real launches simulate_nights.py --bootstrap resamples).
#   PHASE=ab: the A/B gate through pytest: --glm5-ab base,base (A/A), then base,slow10 (gpu/gate/); PHASE=ab,checks does both.
# Replay here with `python scripts/gpu_gate.py --replay FILE`. Wheels the machine lacks go in .whl/ (docs/gpu.md).
set -uo pipefail
OUT=${OUT:-$(mktemp -d)}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || exit 1
fi
# The slowdown hook first (it acts only where a build sets GLM5_TEST_SLOWDOWN), then the carried wheels, then us.
export PYTHONPATH=$PWD/gpu/slowdown:/tmp/site:$PWD
nvidia-smi --query-gpu=name,uuid,memory.used,power.draw,driver_version --format=csv
python3 -c "import transformers, torch; print('transformers', transformers.__version__, 'torch', torch.__version__)"
rc=0
if [[ ${PHASE:-checks} == *ab* ]]; then
  python3 scripts/gpu_gate.py --model-only || exit 1
  GATE=(gpu/gate --glm5-configs=gpu/gate/configs.toml --glm5-baselines="$OUT/baselines" --glm5-log-dir=/tmp/glm5-ab-logs
        -p pytest_glm5.plugin -p no:randomly -q --glm5-max-repeats "${MAX_REPEATS:-4}")
  for pair in base,base base,slow10; do
    echo "== --glm5-ab $pair"
    start=$(date +%s)
    python3 -m pytest "${GATE[@]}" --glm5-ab "$pair" --glm5-report="$OUT/ab-${pair/,/-}.json" 2>&1 \
      | tee "$OUT/ab-${pair/,/-}.log" | tail -25
    echo "exit ${PIPESTATUS[0]}; $(( $(date +%s) - start )) s"
  done
fi
if [[ ${PHASE:-checks} == *checks* ]]; then
  STATE=()
  [ -f .gpu-state/launches.json ] && STATE=(--state .gpu-state/launches.json)
  python3 scripts/gpu_gate.py "$OUT" --minutes "${MINUTES:-8.5}" --cycle "${CYCLE:-base,slow10,slow5}" "${STATE[@]}" 2>&1 \
    | tee "$OUT/gate.log"
  rc=${PIPESTATUS[0]}
  tail -40 /tmp/glm5-gpu-logs/*.log 2>/dev/null | tail -60 > "$OUT/last-server-log.txt"
fi
if pgrep -af "transformers serve"; then echo "LEFTOVER PROCESSES"; exit 1; fi
echo "no process left"
exit $rc
