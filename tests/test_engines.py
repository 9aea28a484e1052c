"""Engine argv, preflight and identity, without launching anything."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from plugin_helpers import said_lines, write_configs

from pytest_glm5.configs import ServerConfig
from pytest_glm5.servers.engines import SGLangEngine, SimEngine
from pytest_glm5.servers.engines.base import EngineError, Preflight
from pytest_glm5.spec.sglang import compare_server_info

CFG = ServerConfig(name="tp8", flags={"tp-size": 8, "disable-cuda-graph": True, "enable-mscclpp": False,
                                      "moe-runner-backend": "flashinfer_cutlass"})


def test_flag_argv_spelling() -> None:
    assert CFG.flag_argv() == ["--tp-size", "8", "--disable-cuda-graph", "--moe-runner-backend", "flashinfer_cutlass"]


def test_sglang_argv_falls_back_to_launch_server_module() -> None:
    argv = SGLangEngine(python="/opt/other/python").argv(CFG, "/models/GLM-5", "127.0.0.1", 30001)
    assert argv[:3] == ["/opt/other/python", "-m", "sglang.launch_server"]
    assert argv[3:5] == ["--model-path", "/models/GLM-5"] and argv[-4:] == ["--host", "127.0.0.1", "--port", "30001"]


def test_sglang_not_importable_names_the_python_and_the_fix() -> None:
    fix = r"SGLang is not importable in .*python.*; install it .* or run with --glm5-sim"
    with pytest.raises(EngineError, match=fix):
        SGLangEngine(python=sys.executable).version()


def test_fingerprint_changes_with_flags_env_model_and_engine_settings() -> None:
    base = CFG.fingerprint("0.5.23", "/m")
    assert base == CFG.fingerprint("0.5.23", "/m")
    assert base != ServerConfig(name="tp8", flags={**CFG.flags, "tp-size": 4}).fingerprint("0.5.23", "/m")
    assert base != ServerConfig(name="tp8", flags=CFG.flags, env={"X": "1"}).fingerprint("0.5.23", "/m")
    assert base != CFG.fingerprint("0.5.24", "/m") != CFG.fingerprint("0.5.23", "/other")
    a = SimEngine(time_scale=0.1).fingerprint_extra()
    assert a != SimEngine(time_scale=0.2).fingerprint_extra()


def test_sim_preflight_gives_sglangs_message() -> None:
    bad = ServerConfig(name="x", flags={"cuda-graph-max-bs": 8})
    msg = SimEngine().preflight(bad, "/m", "127.0.0.1", 1).problem
    assert msg is not None and "ambiguous option: --cuda-graph-max-bs could match" in msg
    assert "use --cuda-graph-max-bs-decode N" in msg
    assert SimEngine().preflight(CFG, "/m", "127.0.0.1", 1) == Preflight()


def test_removed_flag_names_what_replaced_it() -> None:
    gone = ServerConfig(name="x", flags={"enable-piecewise-cuda-graph": True})
    msg = SimEngine().preflight(gone, "/m", "127.0.0.1", 1).problem
    assert msg is not None and "unrecognized arguments: --enable-piecewise-cuda-graph" in msg
    assert "prefill CUDA graphs are now --cuda-graph-backend-prefill {full,breakable,disabled}" in msg


def test_sglang_preflight_says_why_it_was_skipped(tmp_path: Path) -> None:
    # A Python in which sglang's version is readable but its parser is not importable (a broken torch, say).
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho \"IMPORT-FAILED ModuleNotFoundError: No module named 'torch'\"\nexit 3\n")
    fake.chmod(0o755)
    result = SGLangEngine(python=str(fake)).preflight(CFG, "/m", "127.0.0.1", 1)
    assert result.problem is None
    assert result.skipped == f"cannot import sglang.srt.server_args in {fake}: ModuleNotFoundError: No module " \
                             "named 'torch'"


def test_compare_server_info_uses_sglang_dests() -> None:
    info = {"model_path": "/m", "tp_size": 8, "disable_cuda_graph": True, "moe_runner_backend": "flashinfer_cutlass"}
    assert compare_server_info(CFG.flags, "/m", info) == []
    diffs = compare_server_info(CFG.flags, "/n", {**info, "tp_size": 4, "disable_cuda_graph": False})
    assert diffs == ["model_path: server '/m', config '/n'", "--tp-size: server 4, config 8",
                     "--disable-cuda-graph: server False, config True"]


def test_sglang_config_without_sglang_fails_with_the_fix(pytester: pytest.Pytester) -> None:
    write_configs(pytester, '[config.real]\nengine = "sglang"\nflags = { tp-size = 8 }\n')
    pytester.makepyfile("""
import pytest
@pytest.mark.server_config("real")
def test_x(sglang_server): pass
""")
    result = pytester.runpytest()
    result.assert_outcomes(errors=1)
    said_lines(result, ["*SGLang is not importable in * (nor in any python3 on PATH); install it (pip "
                                 "install sglang==0.5.23), name its Python in GLM5_SGLANG_PYTHON*or run with "
                                 "--glm5-sim*"])


def test_sglang_is_found_in_another_python(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The plugin's venv has no SGLang; a system Python on PATH has it: that one runs the server.
    from pytest_glm5.servers.engines import sglang as eng
    other = tmp_path / "sys"
    (other / "sglang").mkdir(parents=True)
    (other / "sglang" / "__init__.py").write_text("")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    py = bindir / "python3"
    py.write_text(f"#!/bin/sh\nPYTHONPATH={other} exec {sys.executable} \"$@\"\n")
    py.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("GLM5_SGLANG_PYTHON", raising=False)
    eng.find_python.cache_clear()
    try:
        assert eng.SGLangEngine().python == str(py)
        monkeypatch.setenv("GLM5_SGLANG_PYTHON", "/nowhere/python")
        eng.find_python.cache_clear()
        assert eng.SGLangEngine().python == "/nowhere/python"
    finally:
        eng.find_python.cache_clear()


def test_transformers_honours_a_builds_env_and_python(tmp_path: Path) -> None:
    # At c979bd9 its env() dropped the build's env, so [build.NAME] and --glm5-ab silently did nothing for it.
    from pytest_glm5.servers.engines import TransformersEngine

    engine = TransformersEngine(python=str(tmp_path / "venv" / "bin" / "python"))
    engine.build_env = {"PATCHED": "1"}
    env = engine.env(ServerConfig("t", engine="transformers", env={"OWN": "x"}))
    assert env == {"HF_HUB_OFFLINE": "1", "OWN": "x", "PATCHED": "1"}
    with pytest.raises(EngineError, match=f"cannot run {tmp_path}/venv/bin/python"):  # its Python, not ours
        engine.version()


def test_an_engine_without_a_python_refuses_a_builds_python(tmp_path: Path) -> None:
    from pytest_glm5.servers.builds import Build
    from pytest_glm5.servers.engines import LlamaCppEngine
    from pytest_glm5.servers.pool import PoolSettings, ServerPool
    from pytest_glm5.servers.process import ServerError

    pool = ServerPool(PoolSettings(model="/m.gguf", log_dir=tmp_path), lambda cfg: LlamaCppEngine())
    try:
        with pytest.raises(ServerError, match=r"build b names the Python /opt/b/bin/python, but engine llamacpp does "
                                              r"not run in a Python of its own.*drop `python` from \[build.b\]"):
            pool.get(ServerConfig("l", engine="llamacpp"), Build("b", python="/opt/b/bin/python"))
    finally:
        pool.close()


def test_a_patched_build_on_the_base_python_says_what_it_measures(pytester: pytest.Pytester) -> None:
    write_configs(pytester, '[config.a]\nflags = {}\n[build.fix]\npatches = ["fix.diff"]\n')
    (pytester.path / "fix.diff").write_text("--- a\n+++ b\n")
    pytester.makepyfile("import pytest\n@pytest.mark.server_config('a')\ndef test_x(sglang_server): pass\n")
    result = pytester.runpytest("--glm5-build", "fix")
    result.assert_outcomes(passed=1)
    said_lines(result, ["a: build fix lists patches but runs the engine's own Python (*): unless that Python was "
                        "built with them (scripts/make_build.sh), this measures unpatched code under the patched "
                        "build's name"])


def test_every_engine_launches_with_its_builds_env() -> None:
    # A build is data for every engine (issue 20: the transformers engine once dropped it): its env reaches the
    # server after the config's, whatever the engine adds of its own.
    from pytest_glm5.servers.engines import ENGINES

    cfg = ServerConfig("c", env={"FROM_CONFIG": "1", "BOTH": "config"})
    for name, make in ENGINES.items():
        engine = make()
        engine.build_env = {"GLM5_TEST_SLOWDOWN": "0.05", "BOTH": "build"}
        env = engine.env(cfg)
        assert env["GLM5_TEST_SLOWDOWN"] == "0.05" and env["FROM_CONFIG"] == "1" and env["BOTH"] == "build", name


def test_the_gpu_slowdown_build_acts_only_where_its_env_says(tmp_path: Path) -> None:
    import subprocess

    hook = Path(__file__).resolve().parent.parent / "gpu" / "slowdown"
    probe = "import sys; print(sum(type(f).__name__ == '_Finder' for f in sys.meta_path))"
    for value, finders in (("0.05", "1"), ("", "0"), ("0", "0")):
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                             env={**os.environ, "PYTHONPATH": str(hook), "GLM5_TEST_SLOWDOWN": value}).stdout
        assert out.strip() == finders, (value, out)


def test_a_build_makes_a_new_engine_value_and_leaves_the_engine_alone() -> None:
    # ServerPool.get applied a build by mutating the engine (engine.build_env = ..., engine.python = ...).
    from pytest_glm5.servers.engines import SGLangEngine, SimEngine

    for engine in (SimEngine(python="/usr/bin/python3"), SGLangEngine(python="/usr/bin/python3")):
        built = engine.with_build({"SGLANG_X": "1"}, "/opt/patched/bin/python", {"build": "patched"})
        assert built is not engine and type(built) is type(engine)
        assert built.build_env == {"SGLANG_X": "1"} and built.build_identity == {"build": "patched"}
        assert built.python == "/opt/patched/bin/python"
        assert engine.build_env == {} and engine.build_identity == {} and engine.python == "/usr/bin/python3"
