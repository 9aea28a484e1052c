"""The run as GitHub-flavoured markdown for `$GITHUB_STEP_SUMMARY` (or --glm5-markdown PATH), at most 64 KiB.

GitHub drops a step summary over 1 MiB whole; this one stays under LIMIT by cutting the collapsed table first,
then the longest lists, each cut saying how many rows it left out and where the rest is. Order: the headline,
regressions, improvements, new metrics, crashes, targets, then every verdict in a collapsed table:

    ## glm5: 2 regressions of 141 series
    ### Regressions (2)
    - **tp8 sweep-c256 output_throughput** 9,120 tok/s vs floor 9,700: -5.8% [-7.1%, -4.4%], p 3e-05 ...
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..judge.verdicts import Kind, to_go_text
from ..words import counted
from . import power

LIMIT = 64 * 1024
GOOD = (Kind.PASS, Kind.KNOWN_COST)


def number(x: float | None) -> str:
    """`9,120` / `10.4` / `0.872`: as many digits as a reader needs."""
    if x is None:
        return "-"
    a = abs(x)
    return f"{x:,.0f}" if a >= 1000 else f"{x:.1f}" if a >= 10 else f"{x:.3g}"


def change_text(d: dict[str, Any]) -> str:
    """The verdict's evidence: the statistical test's change with CI and p, else the delta to the bound."""
    st = d.get("test")
    if st and st.get("describe"):
        return str(st["describe"])
    if d.get("delta") is not None:
        return f"{d['delta'] * 100:+.1f}% vs bound"
    return ""


def bound_text(d: dict[str, Any]) -> str:
    """`floor 9,700 tok/s`, `build base` (A/B), or `-`."""
    st = d.get("test") or {}
    if "build_a" in st:
        return f"build {st['build_a']}"
    b = d.get("bound")
    if b:
        return f"{b['kind']} {number(b['value'])} {d.get('unit', '')}".strip()
    return f"config {st['against']}" if st.get("against") else "-"  # a config against its compare_to reference


def target_text(d: dict[str, Any]) -> str:
    """`target 100 tok/s (42% of it, 2.4x to go)`; '' without a target."""
    b = d.get("bound") or {}
    if b.get("target") is None:
        return ""
    go = d.get("to_go")
    left = to_go_text(go, b.get("kind") == "floor") if go else ""
    return f"target {number(b['target'])} {d.get('unit', '')} ({left})".replace(" ()", "")


def line(d: dict[str, Any]) -> str:
    """One verdict as a list item."""
    name = f"**{_names(d)}**"
    what = f"{number(d['measured'])} {d.get('unit', '')}".strip()
    ev = change_text(d)
    return f"- {name} {what} vs {bound_text(d)}" + (f": {ev}" if ev else "") + (
        f" ({d['note']})" if d.get("note") else "")


def _esc(text: str) -> str:
    """Text as GitHub shows it, not as HTML or markdown it renders: a scenario `<img ...>` or a crash line with
    `<module>` stays text, and a `|` stays inside its table cell."""
    out = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("\n", " ")
    for ch in "\\`*[]|":  # `_` inside a word is not emphasis on GitHub: metric names stay as they are
        out = out.replace(ch, "\\" + ch)
    return out


def _names(d: dict[str, Any]) -> str:
    return " ".join(_esc(str(d[k])) for k in ("config", "scenario", "metric"))


def table(verdicts: Sequence[dict[str, Any]]) -> list[str]:
    """Every verdict as a markdown table, worst first."""
    out = ["| config | scenario | metric | measured | bound | change | verdict | target |",
           "|---|---|---|---:|---|---|---|---|"]
    for d in verdicts:
        out.append("| " + " | ".join(_esc(str(c)) for c in (
            d["config"], d["scenario"], d["metric"], f"{number(d['measured'])} {d.get('unit', '')}".strip(),
            bound_text(d), change_text(d), d["verdict"], target_text(d) or "-")) + " |")
    return out


def order(verdicts: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Invalid (faster, but wrong) first, then regressions, the rest that needs a look, the good ones; stable within
    a kind."""
    rank = {Kind.INVALID: 0, Kind.REGRESSION: 1, Kind.UNRESOLVED: 2, Kind.WORKLOAD_CHANGED: 3, Kind.NEW: 4,
            Kind.IMPROVEMENT: 5}
    return sorted(verdicts, key=lambda d: rank.get(d["verdict"], 6))


def render(doc: dict[str, Any], html_name: str | None = None, limit: int = LIMIT) -> str:
    """The summary of one run document, within `limit` bytes."""
    verdicts = [*doc.get("verdicts", []), *doc.get("versus", [])]
    by = {k: [d for d in verdicts if d["verdict"] == k]
          for k in (Kind.INVALID, Kind.REGRESSION, Kind.IMPROVEMENT, Kind.THROTTLED, Kind.NEW)}
    problems: dict[str, str] = doc.get("problems") or {}
    known: dict[str, str] = doc.get("known_issues") or {}
    targets = [d for d in doc.get("verdicts", []) if (d.get("bound") or {}).get("target") is not None]
    where = f"the HTML report ({html_name})" if html_name else "the JSON report (--glm5-report)"
    n_reg = len(by[Kind.REGRESSION])
    head = (f"## glm5: {counted(n_reg, Kind.REGRESSION)} of {len(verdicts)} series"
            if n_reg else f"## glm5: no regression in {len(verdicts)} series")
    if problems:
        head += f", {counted(len(problems), 'config')} crashed or could not run"
    outcome = doc.get("outcome") or {}
    if outcome.get("line"):  # the run's own last word, as its terminal and exit status say it
        head = f"## glm5: {_esc(str(outcome['line']))}"
    run = doc.get("run") or {}
    meta = " · ".join(str(x) for x in (run.get("commit") and f"commit `{run['commit']}`", run.get("hardware"),
                                       run.get("time")) if x)
    sections: list[tuple[str, list[str]]] = [
        ("Faster, but wrong (invalid: the build answers wrong)", [line(d) for d in by[Kind.INVALID]]),
        ("Regressions", [line(d) for d in by[Kind.REGRESSION]]),
        ("Suspects (one launch beyond the tolerance: a second confirms or clears it)",
         [line(d) for d in verdicts if d["verdict"] == Kind.UNRESOLVED and (d.get("test") or {}).get("suspect")]),
        ("Improvements", [line(d) for d in by[Kind.IMPROVEMENT]]),
        ("Throttled (not comparable: a GPU slowed for heat or a power brake)", [line(d) for d in by[Kind.THROTTLED]]),
        ("New metrics (no baseline yet)", [line(d) for d in by[Kind.NEW]]),
        ("Crashes", [f"- **{_esc(name)}**{' (known issue, expected)' if name in known else ''}: {_esc(why)[:600]}"
                     for name, why in problems.items()]),
        ("Not run", [f"- **{_esc(name)}**: {_esc(why)}" for name, why in (run.get("not_run") or {}).items()]),
        ("Never finished (a worker died; not passed)", [f"- {_esc(t)}" for t in run.get("unfinished") or []]),
        ("Targets", [f"- {_names(d)}: {number(d['measured'])} "
                     f"{d.get('unit', '')}, {target_text(d)}" for d in targets]),
        ("Energy (NVML)", [f"- **{_esc(c)} {_esc(sc)}**: {_esc(text)}"
                           for c, sc, text in power.lines(doc.get("results") or [])]),
    ]
    rows = table(order(verdicts))

    def assemble(keep: dict[str, int], table_rows: int) -> str:
        out = [head, meta, ""] if meta else [head, ""]
        for title, items in sections:
            if not items:
                continue
            out.append(f"### {title} ({len(items)})")
            shown = items[:keep.get(title, len(items))]
            out += shown
            if len(shown) < len(items):
                out.append(f"- ... and {len(items) - len(shown)} more in {where}")
            out.append("")
        out += ["<details><summary>All verdicts</summary>", ""]
        out += rows[:2 + table_rows]
        if table_rows < len(rows) - 2:
            out += ["", f"{len(rows) - 2 - table_rows} more rows in {where}"]
        out += ["", "</details>", ""]
        return "\n".join(out)

    keep: dict[str, int] = {}
    text = assemble(keep, len(rows) - 2)
    n = len(rows) - 2
    while len(text.encode()) > limit and n > 0:
        n = n // 2 if n > 8 else n - 1
        text = assemble(keep, n)
    while len(text.encode()) > limit:
        title, items = max(sections, key=lambda s: min(keep.get(s[0], len(s[1])), len(s[1])))
        have = min(keep.get(title, len(items)), len(items))
        if have == 0:
            break
        keep[title] = have // 2
        text = assemble(keep, 0)
    return text
