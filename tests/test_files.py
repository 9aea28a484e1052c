"""Files: UTF-8 with the offset named, modes, locks and temp files."""

from __future__ import annotations

import os
import stat
import subprocess
import time
from pathlib import Path

import pytest
from plugin_helpers import HARDWARE, servers_of, write_configs

from pytest_glm5.judge.baselines import write_updates
from pytest_glm5.judge.verdicts import Verdict

PKG = Path(__file__).resolve().parents[1] / "pytest_glm5"
ONE = "import pytest\n@pytest.mark.server_config('a')\ndef test_x(sglang_server): pass\n"


def test_non_utf8_configs_names_file_and_offset(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nglm5_configs = configs.toml\n")
    (pytester.path / "configs.toml").write_bytes(b'[config.a]\ndescription = "caf\xe9"\n')
    pytester.makepyfile(ONE)
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: */configs.toml: not UTF-8 text: byte 0xe9 at offset 29 (line 2); save the "
                                 "file as UTF-8"])
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()


def test_broken_baselines_file_found_before_any_launch(pytester: pytest.Pytester) -> None:
    model = write_configs(pytester, "[config.a]\nflags = {}\n")
    pytester.makepyfile("import pytest\n@pytest.mark.server_config('a')\ndef test_x(perf): pass\n")
    target = pytester.path / "baselines" / HARDWARE / f"{Path(model).name}.toml"
    target.parent.mkdir(parents=True)
    target.write_bytes(b"[a.s.output_throughput]\nfloor = 1.0\nnote = \"\xff\"\n")
    t0 = time.monotonic()
    result = pytester.runpytest("--glm5-baselines", "baselines")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: glm5: {target}: not UTF-8 text: byte 0xff at offset * (line 3)*"])
    assert "launched" not in result.stdout.str() and time.monotonic() - t0 < 20
    assert servers_of(model) == []


def test_new_baselines_file_is_readable_by_all(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        path = tmp_path / "hw" / "m.toml"
        write_updates(path, [Verdict("c", "s", "output_throughput", 5.0, None, "new")])
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_lock_and_tmp_files_are_ignored_and_none_committed() -> None:
    root = PKG.parent
    tracked = subprocess.run(["git", "ls-files", "baselines"], cwd=root, capture_output=True, text=True).stdout
    assert ".lock" not in tracked and ".tmp" not in tracked
    for name in ("baselines/hw/.m.toml.lock", "baselines/hw/.m.toml.abc123.tmp"):
        assert subprocess.run(["git", "check-ignore", "-q", name], cwd=root).returncode == 0, name
