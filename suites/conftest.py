"""The GLM-5 / SM120 suite: every check runs once per config of the configs file."""

from __future__ import annotations

import pytest

from pytest_glm5.plugin import server_configs


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrise `glm5_config` over the configs file, each param carrying its server_config marker.

    A test that also takes `concurrency` gets each config's own sweep points (config key `sweep`, else the
    module's SWEEP)."""
    if "glm5_config" not in metafunc.fixturenames:
        return
    configs = server_configs(metafunc.config)
    own = {n for m in metafunc.definition.iter_markers("parametrize") for n in _argnames(m.args[0])}
    if "concurrency" in metafunc.fixturenames and "concurrency" not in own:
        default = list(getattr(metafunc.module, "SWEEP", []))
        metafunc.parametrize(("glm5_config", "concurrency"), [
            pytest.param(n, c, id=f"{n}-c{c}", marks=pytest.mark.server_config(n))
            for n, cfg in configs.items() for c in (cfg.sweep or default)])
    else:
        metafunc.parametrize(
            "glm5_config", [pytest.param(n, id=n, marks=pytest.mark.server_config(n)) for n in configs])


def _argnames(spec: str | list[str] | tuple[str, ...]) -> list[str]:
    return [n.strip() for n in spec.split(",")] if isinstance(spec, str) else list(spec)
