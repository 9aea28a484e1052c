"""Hooks for other plugins' roles, registered only when that plugin is active (pytest-randomly's XdistHooks
pattern), so the general hooks in plugin.py never branch on them: xdist's controller and workers, and the
pytest-benchmark bridge."""

from __future__ import annotations

import json
from typing import Any

import pytest

from .scaleout import scope_of
from .session import Glm5Session

GROUPED = ("loadgroup", "no")


class XdistController:
    """xdist's controller: one work unit per config, and the run documents the workers send."""

    def __init__(self, session: Glm5Session) -> None:
        self.session = session
        self.collected: list[str] = []  # the tests the workers collected (each the same list)
        self.finished: set[str] = set()
        self.dead: list[str] = []  # workers that went down with an error

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        """What the run was to do: a test a dead worker never finished is named, never passed."""
        if not self.collected:
            self.collected = list(ids)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """A test ends with its teardown (xdist's report of a crashed test is failed, whatever its phase)."""
        if report.when == "teardown" or (report.failed and report.when not in ("setup", "call")):
            self.finished.add(report.nodeid)

    @pytest.hookimpl(tryfirst=True)  # before plugin.py's finish, which decides the outcome
    def pytest_sessionfinish(self) -> None:
        """Name the tests a dead worker left: they are part of the outcome."""
        if self.dead:
            self.session.tally.unfinished = [t for t in self.collected if t not in self.finished]

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        """xdist with loadgroup on a suite with glm5 configs: one work unit per config (see scaleout.py)."""
        if config.getvalue("dist") != "loadgroup" or not self.session.has_configs:
            return None
        from xdist.scheduler import LoadScopeScheduling

        names = list(self.session.configs)

        class ByConfig(LoadScopeScheduling):  # type: ignore[misc]
            def _split_scope(self, nodeid: str) -> str:
                return scope_of(nodeid, names)

        return ByConfig(config, log)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """A worker finished; keep the run document it sent (the controller decides and reports once)."""
        if error is not None:
            self.dead.append(str(getattr(getattr(node, "gateway", None), "id", "?")))
        doc = getattr(node, "workeroutput", {}).get("glm5")
        if doc is not None:
            self.session.receive(json.loads(doc))


class XdistWorker:
    """An xdist worker: it measures, then hands its run to the controller, which decides and reports once."""

    def __init__(self, session: Glm5Session, config: pytest.Config) -> None:
        self.session = session
        self.config = config

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Stop this worker's servers and send its run document (before the family decision)."""
        self.session.close()
        doc = self.session.worker_doc()  # None: nothing to hand over
        if doc is not None:
            self.config.workeroutput["glm5"] = doc  # type: ignore[attr-defined]


def dist_grouping(config: pytest.Config, has_configs: bool) -> None:
    """With `-n N`, a config's tests must run on one worker, or each worker launches its own server of it (all
    wanting the same GPUs). `-n` alone gets `--dist loadgroup`, which the plugin's scheduler reads as one work unit
    per config; another --dist given for a suite with glm5 configs is a usage error."""
    dist = getattr(config.option, "dist", "no")
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None) or dist in GROUPED:
        return
    words = [*config.invocation_params.args, *config.getini("addopts")]
    explicit = any(w in ("--dist", "-d", "--distload") or w.startswith("--dist=") for w in words)
    if not explicit:
        config.option.dist = "loadgroup"
    elif has_configs:
        raise pytest.UsageError(
            f"glm5: --dist {dist} would spread a server config's tests over workers, and each worker would launch "
            "its own server of it; use --dist loadgroup (what -n gets by default here): each config runs on one "
            "worker, launched once")


BENCHMARK_ONLY_SKIP = "Skipping non-benchmark (--benchmark-only active)."


class BenchmarkBridge:
    """pytest-benchmark: a serving perf test is a benchmark, and its --benchmark-json holds our results."""

    def __init__(self, session: Glm5Session, config: pytest.Config) -> None:
        self.session = session
        self.config = config
        self.saved = False  # pytest-benchmark wrote its own JSON, with ours in it

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        """`--benchmark-only` runs a perf test (pytest-benchmark would skip it silently, as it uses no `benchmark`
        fixture) and `--benchmark-skip` skips it, saying why."""
        perf_items = [item for item in items if item.get_closest_marker("server_config") is not None]
        if self.config.getoption("benchmark_only", False):
            for item in perf_items:
                item.own_markers[:] = [m for m in item.own_markers
                                       if not (m.name == "skip" and m.kwargs.get("reason") == BENCHMARK_ONLY_SKIP)]
        elif self.config.getoption("benchmark_skip", False):
            for item in perf_items:
                item.add_marker(pytest.mark.skip(reason="glm5 perf test: a benchmark (--benchmark-skip active)"))

    @pytest.hookimpl(optionalhook=True)
    def pytest_benchmark_update_json(self, config: pytest.Config, benchmarks: Any, output_json: dict[str, Any]
                                     ) -> None:
        """pytest-benchmark's --benchmark-json / --benchmark-save of a run with benchmarks of its own: ours join."""
        mine = self.session.benchmarks()
        if mine:
            output_json.setdefault("benchmarks", []).extend(mine)
            self.saved = True

    def json_path(self) -> str | None:
        """Where --benchmark-json goes (None: not asked for)."""
        path = self.config.getoption("benchmark_json", None)
        # pytest-benchmark 5 gives a Path (whose .name would drop the directory), older ones an open file.
        return None if path is None else str(path.name if hasattr(path, "write") else path)


def register(config: pytest.Config, session: Glm5Session, has_configs: bool) -> BenchmarkBridge | None:
    """Register the role plugins this run needs; returns the pytest-benchmark bridge where that plugin is active."""
    pm = config.pluginmanager
    if pm.hasplugin("xdist"):
        dist_grouping(config, has_configs)
        if hasattr(config, "workerinput"):
            pm.register(XdistWorker(session, config), "glm5-xdist-worker")
        else:
            pm.register(XdistController(session), "glm5-xdist-controller")
    if pm.hasplugin("benchmark"):
        bridge = BenchmarkBridge(session, config)
        pm.register(bridge, "glm5-benchmark")
        return bridge
    return None
