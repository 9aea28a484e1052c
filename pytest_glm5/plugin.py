"""pytest hooks and fixture declarations only: each a line or two into the run's session (session.py)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

from . import hookspecs, roles
from .configs import PRODUCTION_MARKER, SPECULATIVE_MARKER, configs_for
from .judge.gate import PerfGate
from .load.types import BenchResult
from .perf.fixture import Perf, PerfContext
from .perf.fixture import bench_all_answered as run_bench
from .report import gateitems
from .report.junit import properties, suite_level
from .report.terminal import TerminalProgress, WorkerLines, header_lines
from .servers.pool import ServerPool
from .servers.process import ServerHandle, interrupt_taken, sigterm_as_interrupt
from .session import Glm5Session, RunError, TestItem
from .settings import SETTINGS, Settings, SettingsError, Sources, check_writable_file, rootdir_trap

MARKER = "server_config"
session_key = pytest.StashKey[Glm5Session]()
bridge_key = pytest.StashKey[roles.BenchmarkBridge | None]()


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    """The suite's hook: `pytest_glm5_suite` in the root conftest.py."""
    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    """Every setting of settings.py, each with an ini twin where a project would set it once."""
    g = parser.getgroup("glm5", "pytest-glm5: LLM serving performance gate")
    for s in SETTINGS:
        if s.flag:
            g.addoption(f"--{s.name}", action="store_true", help=s.help)
        else:
            g.addoption(f"--{s.name}", default=None, help=s.help, **s.argparse)
        if s.ini:
            parser.addini(s.dest, help=s.help)


def _session(config: pytest.Config) -> Glm5Session:
    return config.stash[session_key]


def _usage(exc: RunError) -> pytest.UsageError:
    return pytest.UsageError(str(exc))


def pytest_configure(config: pytest.Config) -> None:
    """Resolve and check every setting (a bad one is a usage error naming its source), build the run's session,
    register the markers and role plugins, and make SIGTERM end the session like Ctrl-C (so servers are stopped)."""
    suite = config.hook.pytest_glm5_suite(config=config) or {}
    here = Path(config.invocation_params.dir)
    trap = None if config.getoption("inifilename", None) else rootdir_trap(
        list(config.invocation_params.args), here.resolve(), Path(config.rootpath).resolve())
    if trap:
        raise pytest.UsageError(f"glm5: {trap}")
    overrides = frozenset(o.partition("=")[0].strip() for o in config.getoption("override_ini", None) or [])
    sources = Sources(option=config.getoption, ini=config.getini, suite=dict(suite.get("defaults", {})),
                      ini_file=str(config.inipath) if config.inipath else "the ini file", overrides=overrides)
    cache = getattr(config, "cache", None)  # absent under -p no:cacheprovider
    worker = getattr(config, "workerinput", {}).get("workerid")
    lines = WorkerLines(worker, config.pluginmanager.get_plugin("capturemanager")) if worker else None

    def terminal() -> Any:
        return lines or config.pluginmanager.get_plugin("terminalreporter")

    try:
        xml = getattr(config.option, "xmlpath", None)
        if xml and not hasattr(config, "workerinput"):  # checked now: not after a night, in a traceback
            check_writable_file(Path(xml).expanduser(), "--junitxml")
        settings = Settings.resolve(sources, Path(config.rootpath), here)
        session = Glm5Session(settings, suite, cache.mkdir if cache is not None else None, terminal,
                              list(config.invocation_params.args), worker)
    except SettingsError as exc:
        raise pytest.UsageError(f"glm5: {exc}") from None
    except RunError as exc:
        raise _usage(exc) from None
    config.stash[session_key] = session
    config.stash[bridge_key] = roles.register(config, session, session.has_configs)
    config.addinivalue_line(
        "markers",
        f"{MARKER}(name): run this test against a live server of the named config from the configs file "
        "(launched once per session, or reused when its fingerprint matches).")
    config.addinivalue_line(
        "markers", f"{PRODUCTION_MARKER}: a production cell (chat, shared prefixes, long inputs, a trace, capacity at "
                   "an SLO): runs only on the configs with `production = true`")
    config.addinivalue_line(
        "markers", f"{SPECULATIVE_MARKER}: a speculative cell (natural text, acceptance): runs on the configs that "
                   "decode speculatively and on the configs they compare to")
    for marker, cc in session.gated_markers.items():
        config.addinivalue_line(
            "markers", f"{marker}: needs compute capability {cc} GPUs (NVML); runs anyway with --glm5-sim or "
                       "--sglang-url")
    interrupts = sigterm_as_interrupt()
    if interrupts is not None:
        config.add_cleanup(interrupts.restore)


def pytest_keyboard_interrupt(excinfo: pytest.ExceptionInfo[BaseException]) -> None:
    """pytest took the interrupt (a SIGTERM's too): it is not sent again (servers/process.py Interrupts)."""
    interrupt_taken()


def pytest_report_header(config: pytest.Config) -> list[str]:
    """Where this run's configs, baselines and hardware key come from, and the emulator's scale."""
    return header_lines(_session(config).settings)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> int | None:
    """`--glm5-stop-servers`: stop the servers earlier runs kept, say so once, and end (as --markers does)."""
    if not config.getoption("glm5_stop_servers", False):
        return None
    config._do_configure()
    try:
        message, code = _session(config).stop_kept()
        print(message, flush=True)
        return code
    finally:
        config._ensure_unconfigure()


def pytest_sessionstart(session: pytest.Session) -> None:
    """Reap servers a killed earlier run left behind."""
    _session(session.config).start()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test that asks for `glm5_config` runs once per config of the configs file, each carrying its
    server_config marker; one that also takes `concurrency` gets each config's own sweep points (config key
    `sweep`, else the module's SWEEP)."""
    if "glm5_config" not in metafunc.fixturenames:
        return
    try:
        run = _session(metafunc.config)
        own = {n for m in metafunc.definition.iter_markers("parametrize") for n in _argnames(m.args[0])}
        if "concurrency" in metafunc.fixturenames and "concurrency" not in own:
            metafunc.parametrize(("glm5_config", "concurrency"), [
                pytest.param(n, c, id=f"{n}-c{c}", marks=pytest.mark.server_config(n))
                for n, c in run.sweep(list(getattr(metafunc.module, "SWEEP", [])))])
        else:
            marks = {m.name for m in metafunc.definition.iter_markers()}
            metafunc.parametrize("glm5_config", [pytest.param(n, id=n, marks=pytest.mark.server_config(n))
                                                 for n in configs_for(run.configs, marks)])
    except RunError as exc:
        raise _usage(exc) from None


def _argnames(spec: str | list[str] | tuple[str, ...]) -> list[str]:
    return [n.strip() for n in spec.split(",")] if isinstance(spec, str) else list(spec)


def _marker_name(item: pytest.Item) -> str | None:
    mark = item.get_closest_marker(MARKER)
    if mark is None:
        return None
    if len(mark.args) != 1 or not isinstance(mark.args[0], str):
        raise pytest.UsageError(f"{item.nodeid}: use @pytest.mark.{MARKER}(\"NAME\") with one config name")
    return str(mark.args[0])


def _test_item(item: pytest.Item) -> TestItem:
    conc = getattr(getattr(item, "callspec", None), "params", {}).get("concurrency")
    return TestItem(item.nodeid, _marker_name(item), frozenset(m.name for m in item.iter_markers()),
                    conc if isinstance(conc, int) else None, any(m.name == "skip" for m in item.iter_markers()))


def pytest_deselected(items: list[pytest.Item]) -> None:
    """Tests that -k, -m or a shard left out: their configs' launches measure a part (no launch cost is recorded)."""
    if items:
        _session(items[0].config).night.left_out([_marker_name(item) for item in items])


@pytest.hookimpl(trylast=True)  # after -m/-k deselection: configs of deselected tests need not exist
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Gate on hardware, check config names and baselines, mark known issues strict-xfail, take this shard's
    configs, group each config's tests."""
    try:
        got = _session(config).collect([_test_item(item) for item in items])
    except RunError as exc:
        raise _usage(exc) from None
    by_id = {item.nodeid: item for item in items}
    for nodeid, reason in got.skips.items():
        by_id[nodeid].add_marker(pytest.mark.skip(reason=reason))
    for nodeid, reason in got.xfails.items():
        by_id[nodeid].add_marker(pytest.mark.xfail(reason=reason, strict=True, raises=None))
    if got.deselected:
        config.hook.pytest_deselected(items=[by_id[n] for n in got.deselected])
    items[:] = [by_id[n] for n in got.order]
    if got.exit is not None:  # --glm5-plan: the plan was printed (or there was none to print)
        pytest.exit(got.exit[0], returncode=got.exit[1])


def _fail(message: str) -> NoReturn:
    pytest.fail(message, pytrace=False)


@pytest.fixture(scope="session")
def glm5_pool(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerPool]:
    """The session's server pool (one live server at a time)."""
    config = request.config
    run = _session(config)
    progress = TerminalProgress(run.terminal, quiet=config.get_verbosity() < 0)
    try:
        pool = run.make_pool(tmp_path_factory.getbasetemp(), progress)
    except RunError as exc:
        raise _usage(exc) from None
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture(scope="session")
def glm5_gate(request: pytest.FixtureRequest) -> PerfGate:
    """The run's perf gate: verdicts and baselines stores."""
    return _session(request.config).make_gate()


@pytest.fixture(scope="session")
def glm5_context(request: pytest.FixtureRequest, glm5_pool: ServerPool, glm5_gate: PerfGate) -> PerfContext:
    """What every perf test of the run shares: pool, gate, hardware key, repeats."""
    return _session(request.config).make_context(glm5_pool, glm5_gate)


@pytest.fixture
def sglang_server(request: pytest.FixtureRequest, glm5_pool: ServerPool) -> ServerHandle:
    """The live server of this test's `server_config` marker (any engine's: the name is the user's word)."""
    name = _marker_name(request.node)
    if name is None:
        raise pytest.UsageError(f"{request.node.nodeid} uses sglang_server without @pytest.mark.{MARKER}(NAME)")
    served = _session(request.config).server(glm5_pool, name)
    if served.skip is not None:
        pytest.skip(served.skip)
    if served.fail is not None or served.handle is None:
        pytest.fail(served.fail or f"no server for {name}", pytrace=False)
    return served.handle


@pytest.fixture
def bench(sglang_server: ServerHandle, glm5_context: PerfContext) -> Callable[..., BenchResult]:
    """`bench(concurrency=1, num_prompts=None, input_len=128, output_len=128, max_failed=0, ...)` against this test's
    server; more failed requests than `max_failed` fail the test."""

    def run(concurrency: int = 1, num_prompts: int | None = None, **kw: Any) -> BenchResult:
        return run_bench(sglang_server, glm5_context, _fail, concurrency, num_prompts, **kw)

    return run


@pytest.fixture
def perf(sglang_server: ServerHandle, glm5_context: PerfContext) -> Perf:
    """`perf.run(scenario, concurrency, ...)` then `perf.check(results, scenario, metrics)`."""
    return Perf(sglang_server, glm5_context, _fail)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    """Tag the verdicts this test made with its id, and give them to JUnit XML as properties (on the test case
    under xunit1, on the suite, prefixed with the test id, under xunit2, whose schema allows no other place)."""
    run = _session(item.config)
    mark = run.mark()
    try:
        return (yield)
    finally:
        mine = run.tag(mark, item.nodeid)
        from _pytest.junitxml import xml_key  # where pytest keeps its LogXML; record_testsuite_property uses it

        xml = item.config.stash.get(xml_key, None) if mine else None
        if mine and xml is not None:
            if suite_level(str(item.config.getini("junit_family"))):
                for name, value in properties(mine):
                    xml.add_global_property(f"{item.nodeid}::{name}", value)
            else:
                item.user_properties.extend(properties(mine))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    """After a config's last test: its rounds, before pytest tears down the run's fixtures (the pool among them);
    then, with GPU leases, its server is stopped (or kept idle)."""
    run = _session(item.config)
    name, next_name = _marker_name(item), _marker_name(nextitem) if nextitem else None
    capman = item.config.pluginmanager.getplugin("capturemanager")
    with capman.global_and_fixture_disabled() if capman is not None else contextlib.nullcontext():
        run.rounds_after(name, next_name, nextitem is None)  # its lines are live, not a teardown's captured output
    try:
        return (yield)
    finally:
        run.release_after(name, next_name, nextitem is None)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A strict-xfail test of a known issue passes only on the known failure; a failing test of a server config
    gets that server's log tail as a report section; the session learns which gated tests ran."""
    report = yield
    run = _session(item.config)
    run.tally.reported(item.nodeid, call.when, report.skipped)
    name = _marker_name(item)
    if call.when in ("setup", "call") and hasattr(report, "wasxfail"):
        mismatch = run.known_issue_mismatch(name, str(report.longrepr or ""))
        if mismatch is not None:  # any failure would satisfy a strict xfail; only the known one may
            report.outcome, report.longrepr = "failed", mismatch
            del report.wasxfail
    if report.failed and call.when != "teardown":
        section = run.log_section(name)
        if section is not None:
            report.sections.append(section)
    return report


@pytest.hookimpl(tryfirst=True)  # the gate's failed items reach JUnit, the summary and --lf before they finish
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Stop servers (also after Ctrl-C); the family decision, baseline updates, the outcome and every output, once;
    the exit status is the outcome's."""
    config = session.config
    run = config.stash.get(session_key, None)
    if run is None:
        return
    bridge = config.stash.get(bridge_key, None)
    _, failed = run.finish(bool(config.option.collectonly), bridge.json_path() if bridge else None,
                           bool(bridge and bridge.saved), session.testsfailed,
                           exitstatus == pytest.ExitCode.INTERRUPTED)
    if run.view is None:
        return
    regressed = run.regressed
    gateitems.emit(regressed, pytest.TestReport, lambda r: config.hook.pytest_runtest_logreport(report=r))
    lf = config.pluginmanager.get_plugin("lfplugin")
    if lf is not None:
        gateitems.mark_last_failed(lf.lastfailed, regressed, {v.test for v in run.view.verdicts if v.test})
    if failed and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """What the pools did (launches, reuses and why, failures), the verdict table and what was written."""
    run = config.stash.get(session_key, None)
    if run is not None:
        run.summary(terminalreporter)
        sys.stdout.flush()
