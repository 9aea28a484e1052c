"""A perf test's metrics as JUnit XML properties, valid under both of pytest's junit families.

Under `junit_family=xunit1` they go on the test case (`<testcase><properties>`, as `record_property` does);
xunit2's schema allows properties only on the test suite, so there each name is prefixed with the test's id
(as `record_testsuite_property` does). Per metric, five properties:

    glm5.single-stream.output_throughput.measured  = 1038.5 tok/s
    glm5.single-stream.output_throughput.bound     = floor 1000 tok/s
    glm5.single-stream.output_throughput.delta     = +3.9%
    glm5.single-stream.output_throughput.verdict   = pass
    glm5.single-stream.output_throughput.test      = -0.2% [-1.8%, +1.5%], p 0.6, CV 1.1%, 1 vs 5 launches
"""

from __future__ import annotations

from collections.abc import Sequence

from ..judge.verdicts import Verdict, fmt
from ..metrics import unit_of

FAMILIES = ("xunit1", "legacy", "xunit2")


def properties(verdicts: Sequence[Verdict]) -> list[tuple[str, str]]:
    """(name, value) pairs for the verdicts of one test."""
    out: list[tuple[str, str]] = []
    for v in verdicts:
        unit = unit_of(v.metric)
        key = f"glm5.{v.scenario}.{v.metric}"
        bound = "-" if v.bound is None else f"{v.bound.kind} {fmt(v.bound.value)}{unit}"
        if v.stat and "build_a" in v.stat:
            bound = f"build {v.stat['build_a']}"
        change = v.stat["gain"] if v.stat else v.delta
        out += [(f"{key}.measured", f"{fmt(v.measured)}{unit}"), (f"{key}.bound", bound),
                (f"{key}.delta", "-" if change is None else f"{change * 100:+.1f}%"), (f"{key}.verdict", v.verdict)]
        if v.stat:
            out.append((f"{key}.test", str(v.stat["describe"])))
        if v.target is not None:
            out.append((f"{key}.target", f"{fmt(v.target)}{unit}"))
    return out


def suite_level(family: str) -> bool:
    """xunit2 takes properties only on the test suite."""
    return family == "xunit2"
