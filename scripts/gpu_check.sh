#!/usr/bin/env bash
# What only a GPU shows, on a GPU machine (the device tool's H200), from the repo root:
#   transformers serve --continuous-batching on the GPU with a tiny random-weight model made here, a pytest
#   suite through the plugin (launch by config marker, a concurrency sweep, NVML telemetry, baselines recorded
#   then checked), the sm120 suite's gating, and a check that no server process is left.
# Wheels missing on the machine go in .whl/ (docs/gpu.md lists them). Results go to $OUT (default: a temp dir).
# It fits the device tool's 10-minute command: recording and checking are bounded to 2 launches each
# (--glm5-max-repeats 2); each step prints the seconds since the start, and the last line the total.
set -uo pipefail
START=$(date +%s)
step() { echo "== [$(( $(date +%s) - START )) s] $*"; }
OUT=${OUT:-$(mktemp -d)}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
export PYTHONPATH=$PWD
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || exit 1
  export PYTHONPATH=/tmp/site:$PWD
fi
# Not pip-installed here, so the plugin is named (an installed one registers itself through its entry point).
PLUGIN=(-p pytest_glm5.plugin)
python3 -c "import importlib.metadata as m; m.version('pytest-glm5')" 2>/dev/null && PLUGIN=()
# Three repeats a point (one value per launch is their geometric mean); at most 2 launches a run, so that the whole
# check fits one 10-minute command (recording would otherwise go on until each reference resolves its tolerance).
H200=(gpu/test_h200.py --glm5-configs gpu/configs.toml --glm5-baselines="$OUT/baselines" --glm5-log-dir="$OUT/logs" -p no:randomly
      -rs --glm5-repeats "${GLM5_REPEATS:-3}" --glm5-max-repeats 2)
step "GPU"; nvidia-smi --query-gpu=name,compute_cap,memory.used,power.draw,driver_version --format=csv
step "hardware key and inventory (NVML)"
python3 -c "from pytest_glm5.telemetry.nvml import inventory, hardware_key, describe; g = inventory(); \
print(hardware_key(g) if g else None, '|', describe(g), '|', g[0] if g else '')"
step "tiny model"
python3 -c "from pathlib import Path; from pytest_glm5.testing.tinymodel import write_hf; print(write_hf(Path('/tmp/glm5-tiny-hf')))" \
  2>&1 | tail -1
step "GPU leases: a lease puts the server on that GPU"
python3 scripts/gpu_lease_check.py 2>&1 | tee "$OUT/leases.log"
step "1/3 record: the sweep on the GPU, --update-baselines"
python3 -m pytest "${PLUGIN[@]}" "${H200[@]}" -s --update-baselines --glm5-report="$OUT/record.json" 2>&1 | tee "$OUT/record.log"
step "2/3 check: the same suite against what was just recorded"
python3 -m pytest "${PLUGIN[@]}" "${H200[@]}" --glm5-report="$OUT/check.json" 2>&1 | tee "$OUT/check.log"
step "energy (report/power.py) and what each launch answered (the canary), from both reports"
python3 - "$OUT/record.json" "$OUT/check.json" <<'PY'
import json, sys
from pytest_glm5.report import power
for path in sys.argv[1:]:
    doc = json.load(open(path))
    name = path.rsplit("/", 1)[-1]
    for config, scenario, text in power.lines(doc.get("results") or []):
        print(f"{name} {config} {scenario}: {text}")
    for line in (doc.get("run", {}).get("answers") or {}).get("lines", []):
        print(f"{name} answers: {line}")
    for v in doc.get("verdicts", []):
        if v["metric"] == "output_throughput" and v.get("provenance", {}).get("power"):
            print(f"{name} {v['config']} {v['scenario']} power recorded: {v['provenance']['power']}")
            break
PY
step "3/3 sm120 suite on this GPU: every test skips, and the outcome line says why"
python3 -m pytest "${PLUGIN[@]}" suites -m sm120 -q -p no:randomly 2>&1 | tee "$OUT/sm120.log" \
  | grep -E "^(PASSED|FAILED|SKIPPED): |^    |skipped in|passed in|failed in"
step "the suite's server ran on its lease"
python3 -c "import json, sys; s = json.load(open(sys.argv[1]))['servers']; print({n: v['gpus'] for n, v in s.items()})" \
  "$OUT/record.json"
step "processes left"
if pgrep -af "transformers serve|pytest_glm5.sim|llama-server"; then echo "LEFTOVER PROCESSES"; exit 1; fi
echo "none"
step "done"
