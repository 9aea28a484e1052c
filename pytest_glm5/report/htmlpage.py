"""`--glm5-html PATH`: the run as one self-contained page (no request leaves the file when it is opened).

The page inlines uPlot 1.6.32 (MIT, 51 KB minified: canvas charts, drawn in milliseconds), its CSS, the page's
own script and style (pytest_glm5/page/), and the data as one JSON block. What it shows, in order: the verdict
table (regressions at the top, every row, a percentile with the requests it came from and its CI), then per config:
output throughput against concurrency with the baseline band (where there is a sweep), each scenario's launches
beside its reference launches (a strip per scenario, as changes from the reference), TTFT and ITL distributions per
scenario (CDF) beside the recorded ones, GPU telemetry per GPU over the run (power, memory, SM clock; NVML), the
history of each gated metric with its change points, and a crash's forensics.
Charts are drawn as they scroll into view, so the first paint does not wait for hundreds of them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from ..judge.verdicts import Kind
from ..metrics import geometric_mean, latency_family
from ..words import counted
from . import frontier, power
from .exports import write_text
from .markdown import change_text, order, target_text

MAX_TELEMETRY_POINTS = 240
PAGE_BUDGET = 3_000_000  # bytes: a page past this opens slowly in a CI artifact viewer and a mail client


def _r(x: Any) -> Any:
    """A number to 5 significant digits (the page shows 3-4): JSON of 6,000 verdicts stays small."""
    if isinstance(x, float):
        return float(f"{x:.5g}")
    if isinstance(x, list):
        return [_r(v) for v in x]
    return x


def _asset(name: str) -> str:
    return resources.files("pytest_glm5.report").joinpath("page", name).read_text(encoding="utf-8")


def _compact_verdict(d: dict[str, Any]) -> dict[str, Any]:
    b = d.get("bound") or {}
    # What the table shows, nothing more: the launches and the references are in the sweep charts and the report.
    spread = d.get("spread") or {}
    # A percentile says what it was taken from: a p99 of 40 requests is not a p99 of 4,000; its CI comes with the
    # pooled percentile it brackets (the measured value is a mean of each launch's own).
    count = spread.get("requests") or spread.get("gaps")
    return {"c": d["config"], "s": d["scenario"], "m": d["metric"], "u": d.get("unit", ""), "v": _r(d["measured"]),
            "k": b.get("kind"), "b": _r(b.get("value")), "verdict": d["verdict"], "ev": change_text(d),
            "note": d.get("note", ""), "tt": target_text(d), "vs": (d.get("test") or {}).get("against", ""),
            "n": count, "nw": "requests" if spread.get("requests") else "inter-token gaps" if count else None,
            "ci": _r(spread.get("order_ci95")), "pc": _r(spread.get("pooled")),
            "sp": 1 if (d.get("test") or {}).get("suspect") else 0}


def _sweep(verdicts: Sequence[dict[str, Any]], config: str) -> list[dict[str, Any]]:
    pts = {}
    for d in verdicts:
        if d["config"] != config or d["metric"] != "output_throughput":
            continue
        conc = (d.get("workload") or {}).get("concurrency")
        if not isinstance(conc, int):
            continue
        b = d.get("bound") or {}
        ref = b.get("launches") or []
        pts[conc] = {"conc": conc, "scenario": d["scenario"], "value": d["measured"],
                     "launches": d.get("launches") or [], "floor": b.get("value"), "tol": b.get("tolerance"),
                     "ref_min": min(ref) if ref else None, "ref_max": max(ref) if ref else None,
                     "target": b.get("target"), "verdict": d["verdict"]}
    return [pts[c] for c in sorted(pts)]


def _strips(verdicts: Sequence[dict[str, Any]], config: str) -> list[dict[str, Any]]:
    """Per scenario of a config, today's launches beside the reference launches of output throughput, as changes
    from the reference's geometric mean (scenarios of 10 and 3,700 tok/s share one axis that way)."""
    out = []
    for d in verdicts:
        b = d.get("bound") or {}
        test = d.get("test") or {}
        # Against its recorded reference; in an A/B run, build B's launches against build A's.
        ref = [x for x in (b.get("launches") or test.get("launches_a") or []) if x > 0]
        today = [x for x in d.get("launches") or d.get("samples") or [] if x > 0]
        if d["config"] != config or d["metric"] != "output_throughput" or not ref or not today:
            continue
        mid = geometric_mean(ref)
        names = ("reference", "today") if b else (f"build {test.get('build_a')}", f"build {test.get('build_b')}")
        out.append({"scenario": d["scenario"], "ref": [round(x / mid - 1, 5) for x in ref],
                    "today": [round(x / mid - 1, 5) for x in today], "ref_mean": _r(mid), "value": _r(d["measured"]),
                    "tol": b.get("tolerance") or test.get("tolerance"), "verdict": d["verdict"], "names": names})
    return out


def _reference_cdfs(verdicts: Sequence[dict[str, Any]], config: str, scenario: str) -> dict[str, list[list[float]]]:
    """The recorded TTFT and ITL distributions of a scenario (from its baselines entries), as the page draws them."""
    out: dict[str, list[list[float]]] = {}
    for d in verdicts:
        family = latency_family(d["metric"])
        cdf = (d.get("bound") or {}).get("cdf") or []
        if d["config"] == config and d["scenario"] == scenario and family and cdf and family not in out:
            out[family] = _cdf(list(cdf))
    return out


def _cdf(quantiles: list[float]) -> list[list[float]]:
    """[[x...], [p...]] with distinct positive x (the last quantile of a repeated value), as a CDF on a log axis
    needs."""
    n = len(quantiles)
    xs: list[float] = []
    ps: list[float] = []
    for i, x in enumerate(quantiles):
        p = i / (n - 1) if n > 1 else 1.0
        if x <= 0:
            continue
        if xs and x <= xs[-1]:
            ps[-1] = p
            continue
        xs.append(x)
        ps.append(p)
    return [_r(xs), [round(p, 4) for p in ps]]


def _telemetry(runs: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """Every run's NVML samples of a config on one clock (seconds since its first run), thinned per GPU."""
    rows: list[dict[str, float]] = []
    t0: float | None = None
    for r in runs:
        tel = r.get("telemetry")
        if not tel or not tel.get("samples"):
            continue
        start = float(r.get("started_at") or 0.0)
        t0 = start if t0 is None else t0
        rows += [{**s, "t": s["t"] + start - t0} for s in tel["samples"]]
    if not rows:
        return None
    gpus = sorted({int(s["gpu"]) for s in rows})
    out: dict[str, Any] = {"gpus": gpus, "series": {}}
    for g in gpus:
        mine = [s for s in rows if int(s["gpu"]) == g]
        step = max(1, len(mine) // MAX_TELEMETRY_POINTS)
        mine = mine[::step]
        out["series"][str(g)] = {"t": [round(s["t"], 2) for s in mine],
                                 "power": [round(s["power_w"], 1) for s in mine],
                                 "mem": [round(s["memory_used_gb"], 2) for s in mine],
                                 "clock": [round(s["sm_clock_mhz"]) for s in mine]}
    return out


def _history(analyses: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Runs once (time, commit, build), each series as a value per run (None where it was not measured)."""
    runs: dict[int, dict[str, str]] = {}
    for a in analyses:
        for p in a["points"]:
            runs.setdefault(p["run"], {"t": p["time"], "commit": p["commit"], "build": p["build"]})
    index = {r: i for i, r in enumerate(sorted(runs))}
    series = []
    for a in analyses:
        values: list[float | None] = [None] * len(index)
        for p in a["points"]:
            values[index[p["run"]]] = round(p["value"], 4)
        series.append({"c": a["config"], "s": a["scenario"], "m": a["metric"], "u": a["unit"], "values": values,
                       "steps": [{"at": index[st["run"]], "change": st["change"], "ci": st["ci"], "p": st["p"],
                                  "worse": st["worse"], "commit": st["commit"], "time": st["time"]}
                                 for st in a["steps"]],
                       "drift": a["drift"], "target": a["target"], "bound": a["bound"]})
    return {"runs": [runs[r] for r in sorted(runs)], "series": series,
            "unavailable": next((a["unavailable"] for a in analyses if a.get("unavailable")), "")}


def page_data(doc: dict[str, Any], analyses: Sequence[dict[str, Any]] = (), history_note: str = "") -> dict[str, Any]:
    """What the page's script draws, from the run document and the history's analyses."""
    verdicts = order([*doc.get("verdicts", []), *doc.get("versus", [])])
    servers: dict[str, Any] = doc.get("servers") or {}
    problems: dict[str, str] = doc.get("problems") or {}
    names = list(dict.fromkeys([*(d["config"] for d in doc.get("verdicts", [])), *servers, *problems]))
    results: dict[str, list[dict[str, Any]]] = {}
    for r in doc.get("results", []):
        results.setdefault(r["config"], []).append(r)
    configs = []
    for name in names:
        dists = []
        for r in results.get(name, []):
            last = r["runs"][-1] if r["runs"] else {}
            d = last.get("distributions") or {}
            if d.get("ttft_ms") or d.get("itl_ms"):
                ref = _reference_cdfs(doc.get("verdicts", []), name, r["scenario"])
                dists.append({"scenario": r["scenario"], "ttft": _cdf(d.get("ttft_ms") or []),
                              "itl": _cdf(d.get("itl_ms") or []), "ref_ttft": ref.get("ttft"),
                              "ref_itl": ref.get("itl")})
        srv = servers.get(name) or {}
        crash = None
        if problems.get(name) or srv.get("crash"):
            crash = {"why": problems.get(name) or srv.get("crash"), "exit": srv.get("exit_status"),
                     "known": (doc.get("known_issues") or {}).get(name),
                     "log": srv.get("log_path"), "tail": srv.get("log_tail") or []}
        configs.append({"name": name, "sweep": _sweep(doc.get("verdicts", []), name),
                        "strips": _strips(doc.get("verdicts", []), name), "dists": dists,
                        "telemetry": _telemetry([x for r in results.get(name, []) for x in r["runs"]]),
                        "energy": [f"{sc}: {text}" for _, sc, text in power.lines(results.get(name, []))],
                        "crash": crash, "server": {k: srv.get(k) for k in ("how", "why", "engine", "startup_s",
                                                                           "exit_status", "log_path")}})
    counts: dict[str, int] = {}
    for d in verdicts:
        counts[d["verdict"]] = counts.get(d["verdict"], 0) + 1
    data = {"run": doc.get("run") or {}, "outcome": doc.get("outcome") or {}, "counts": counts,
            "crashes": len([c for c in configs if c["crash"]]),
            "verdicts": [_compact_verdict(d) for d in verdicts], "configs": configs,
            "history": _history(analyses), "history_note": history_note,
            "frontier": frontier.page(doc.get("results", []))}
    return _fit(data, {d["config"] for d in verdicts if d["verdict"] in (Kind.INVALID, Kind.REGRESSION)})


def _size(data: Any) -> int:
    return len(json.dumps(data, separators=(",", ":"), default=str).encode())


def _fit(data: dict[str, Any], regressed: set[str]) -> dict[str, Any]:
    """Keep the page under PAGE_BUDGET: the verdict table always whole; past the budget, first the latency CDFs
    of configs that neither regressed nor crashed go, then the history of series without a change point, each
    said on the page (the JSON report keeps everything)."""
    if _size(data) <= PAGE_BUDGET:
        return data
    left: list[str] = []
    quiet = [c for c in data["configs"] if c["dists"] and c["name"] not in regressed and not c["crash"]]
    for c in quiet:
        c["dists"] = []
    if quiet:
        left.append(f"latency distributions of {len(quiet)} configs without a regression or crash")
    if _size(data) > PAGE_BUDGET:
        series = data["history"]["series"]
        flat = [s for s in series if not s["steps"] and s["c"] not in regressed]
        data["history"]["series"] = [s for s in series if s["steps"] or s["c"] in regressed]
        if flat:
            left.append(f"the history of {len(flat)} series without a change point")
    note = (f"Left out to keep this page under {PAGE_BUDGET // 1_000_000} MB: {'; '.join(left)}; the --glm5-report "
            "file and `glm5 history` have them.")
    data["history_note"] = " ".join(x for x in (data["history_note"], note) if x)
    return data


def headline(counts: dict[str, int]) -> str:
    """The page's first words: what answered wrong, else the regressions (`1 invalid (faster, but wrong)`)."""
    wrong, regs = counts.get(Kind.INVALID, 0), counts.get(Kind.REGRESSION, 0)
    if wrong:
        return f"{wrong} invalid (faster, but wrong)"
    return counted(regs, Kind.REGRESSION) if regs else "no regression"


def render(doc: dict[str, Any], analyses: Sequence[dict[str, Any]] = (), history_note: str = "") -> str:
    """The page as one string."""
    data = page_data(doc, analyses, history_note)
    run = data["run"]
    title = "glm5: " + headline(data["counts"]) + (
        f" · {run.get('hardware', '')}" if run.get("hardware") else "")
    blob = json.dumps(data, separators=(",", ":"), default=str).replace("</", "<\\/")
    return (_asset("page.html")
            .replace("{{title}}", _html_escape(title))
            .replace("/*{{uplot_css}}*/", _asset("uPlot.min.css"))
            .replace("/*{{page_css}}*/", _asset("page.css"))
            .replace("/*{{uplot_js}}*/", _asset("uPlot.iife.min.js").replace("</", "<\\/"))
            .replace("/*{{page_js}}*/", _asset("page.js"))
            .replace("{{data}}", blob))


def _html_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def write(path: Path, doc: dict[str, Any], analyses: Sequence[dict[str, Any]] = (), history_note: str = "") -> int:
    """Write the page atomically; returns its size in bytes."""
    text = render(doc, analyses, history_note)
    write_text(path, text)
    return len(text.encode())

