"""A regression is a failed test: once the run's family decision is made, each test that measured a regression gets
a failed gate item, `<file>::glm5-gate::<test>`, in pytest's summary, JUnit and the last-failed cache (so `--lf` reruns
the test that measured it). Decided at the end, never earlier: nothing stops a night at its first drop unless the
user asks for that with `-x`/`--maxfail` on other failures.

Nothing here imports pytest: the plugin hands in pytest's report class and its hook caller.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, MutableMapping, Sequence
from typing import Any

from ..judge.verdicts import Kind, Verdict

GATE = "glm5-gate"


def gate_id(test: str) -> str:
    """`suites/t.py::test_x[tp8]` -> `suites/t.py::glm5-gate::test_x[tp8]` (JUnit: class glm5-gate, the test's name)."""
    path, _, name = test.partition("::")
    return f"{path}::{GATE}::{name or 'run'}"


def regressions(verdicts: Iterable[Verdict], confirmed: Sequence[Verdict]) -> list[Verdict]:
    """The family's confirmed regressions and those of provisional bounds (one launch, no statistics)."""
    return [*confirmed, *(v for v in verdicts if v.verdict == Kind.REGRESSION and not v.stat)]


def by_test(regressed: Iterable[Verdict]) -> dict[str, list[Verdict]]:
    """Regressions grouped by the test that measured them (`run` for one without a test id)."""
    out: dict[str, list[Verdict]] = {}
    for v in regressed:
        out.setdefault(v.test or "glm5", []).append(v)
    return out


def emit(regressed: Sequence[Verdict], make_report: Callable[..., Any], log_report: Callable[[Any], None]) -> None:
    """A failed gate item per test that measured a regression: setup, call (failed, with every regression line)
    and teardown, as pytest-xdist's controller replays a worker's reports."""
    for test, vs in by_test(regressed).items():
        nodeid = gate_id(test)
        path = test.split("::", 1)[0]
        text = "\n".join(["regression confirmed after the run's family decision:", *(f"  {v.line()}" for v in vs)])
        location = (path, None, nodeid.split("::", 1)[-1])
        for when, outcome, longrepr in (("setup", "passed", None), ("call", "failed", text),
                                        ("teardown", "passed", None)):
            log_report(make_report(nodeid, location, {"glm5-gate": 1}, outcome, longrepr, when))


def mark_last_failed(lastfailed: MutableMapping[Any, bool], regressed: Sequence[Verdict],
                     measured: Iterable[str]) -> None:
    """Put each test that measured a regression in the last-failed cache (`--lf` reruns the measurement, not only
    its gate item); drop gate items of tests that measured again without one. Keys are compared as text: pytest 9
    keeps them as node-id objects, earlier versions as strings."""
    bad = set(by_test(regressed))
    for test in bad:
        lastfailed[test] = True
    stale = {gate_id(test) for test in set(measured) - bad}
    for key in [k for k in lastfailed if str(k) in stale]:
        del lastfailed[key]
