#!/usr/bin/env bash
# The main job. First the whole GLM-5 / SM120 suite rehearsed on the emulator (any machine, about 4 minutes on
# 2 cores), then the real thing: `pytest -m sm120` against SGLang on the GPUs, whatever the rehearsal said.
# On a box with NVIDIA GPUs (nvidia-smi on PATH or /dev/nvidia0; GLM5_EXPECT_GPUS=1/0 says so explicitly) a real run
# that measured nothing fails (--glm5-require-baselines): a broken driver must not make a night green. On a machine
# without any, the real run skips every test and says why, and the script's status is the rehearsal's.
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
# The checkout is installed editable: its code is live, so only a changed pyproject.toml (dependencies, entry points)
# or an install from elsewhere needs pip, and a night on a box without an index goes on as it did yesterday.
stamp="$(sha256sum pyproject.toml | cut -c1-64) $PWD"
if [ "$(cat "$VENV/.glm5-installed" 2>/dev/null)" = "$stamp" ] &&
   "$VENV/bin/python" -c 'import sys, pytest_glm5; sys.exit(not pytest_glm5.__file__.startswith(sys.argv[1] + "/"))' \
     "$PWD" 2>/dev/null; then
  echo "nightly.sh: $VENV holds this checkout's install (pyproject.toml unchanged since): not reinstalled"
else
  "$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
  "$VENV/bin/python" -m pip install -q -e .
  echo "$stamp" > "$VENV/.glm5-installed"
fi
echo "== 1/2 rehearsal: pytest -m sm120 --glm5-sim --glm5-accuracy-set generated:200"
set +e
# The accuracy set the rehearsal's answers reference was recorded on (baselines/sim-*/GLM-5-NVFP4.answers.json):
# the emulator's paired accuracy test runs every night beside its canary.
"$VENV/bin/python" -m pytest -m sm120 --glm5-sim --glm5-accuracy-set generated:200 "$@"
rehearsal=$?
expect=${GLM5_EXPECT_GPUS:-}
if [ -z "$expect" ]; then
  if command -v nvidia-smi >/dev/null 2>&1 || [ -e /dev/nvidia0 ]; then expect=1; else expect=0; fi
fi
if [ "$expect" = 1 ]; then
  echo "== 2/2 the real suite: pytest -m sm120 --glm5-require-baselines (the rehearsal exited $rehearsal; this box" \
       "has NVIDIA GPUs: a run that measures nothing fails)"
  # The history the next night finds: launches carry from night to night, and a suite longer than the budget is
  # scheduled over nights (GLM5_HISTORY moves it; docs/night.md). The budget bounds the night (8 h unless
  # GLM5_BUDGET says otherwise, or a --glm5-budget among the arguments, which come last and win): without one the
  # real suite's first launches alone are 11.4 h and nothing is ever scheduled.
  real=(-m pytest -m sm120 -rs --glm5-require-baselines --glm5-history="${GLM5_HISTORY:-$HOME/glm5-history}"
        --glm5-budget="${GLM5_BUDGET:-8h}" "$@")
  echo "nightly.sh: $VENV/bin/python ${real[*]}"
  "$VENV/bin/python" "${real[@]}"
  rc=$?
else
  echo "== 2/2 the real suite: pytest -m sm120 (the rehearsal exited $rehearsal; no NVIDIA GPU here: no nvidia-smi," \
       "no /dev/nvidia0)"
  "$VENV/bin/python" -m pytest -m sm120 -rs "$@"
  rc=$?
  if [ "$rc" = 0 ] || [ "$rc" = 5 ]; then
    echo "nightly.sh: no NVIDIA GPU on this machine, so the real suite measured nothing (see its last line); this" \
         "run's status is the rehearsal's ($rehearsal). On the box, set GLM5_EXPECT_GPUS=1 if nvidia-smi is missing"
    exit "$rehearsal"
  fi
fi
set -e
if [ "$rehearsal" != 0 ] && [ "$rc" = 0 ]; then
  echo "nightly.sh: the real suite passed; the rehearsal on the emulator exited $rehearsal (see above): the plugin" \
       "or the suite may need a look before the next night"
fi
exit "$rc"
