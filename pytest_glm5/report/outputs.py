"""Everything a run writes after its tests, from its one run document: the JSON report, the history line, the
HTML page, the markdown summary and the exports. Each output that fails is one error line naming the path and
the cause; the others are still written.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..settings import Settings, check_creatable_dir, check_writable_file
from . import exports, htmlpage, markdown
from .history import HistoryError, append, for_run, history_rows, series_of
from .trends import Analysis, analyse


@dataclass
class Outputs:
    """Where this run's outputs go (None: not asked for)."""

    report: Path | None = None
    html: Path | None = None
    markdown: Path | None = None  # --glm5-markdown: written whole
    step_summary: Path | None = None  # $GITHUB_STEP_SUMMARY: appended, as GitHub expects
    history: Path | None = None
    exports: list[tuple[str, Path]] = field(default_factory=list)
    benchmark_json: Path | None = None  # pytest-benchmark's --benchmark-json, where it wrote none itself

    @classmethod
    def from_settings(cls, s: Settings, environ: Mapping[str, str]) -> Outputs:
        """The run's output paths, each checked now (not after an hour of load); SettingsError names the one that
        cannot be written."""
        out = cls()
        for name, given in (("glm5-report", s.report), ("glm5-html", s.html), ("glm5-markdown", s.markdown)):
            if given is not None:
                check_writable_file(Path(given), f"--{name}")
                setattr(out, name.removeprefix("glm5-"), Path(given))
        for fmt, path in s.export:
            check_writable_file(Path(path), f"--glm5-export {fmt}:")
            out.exports.append((fmt, Path(path)))
        summary = environ.get("GITHUB_STEP_SUMMARY")
        if summary:
            check_writable_file(Path(summary), "$GITHUB_STEP_SUMMARY")
            out.step_summary = Path(summary)
        if s.history is not None:
            out.history = Path(s.history)
            check_creatable_dir(out.history, f"history directory ({s.source('glm5-history')})")
        return out

    @property
    def any(self) -> bool:
        """Whether anything is to be written."""
        return bool(self.report or self.html or self.markdown or self.step_summary or self.history or self.exports
                    or self.benchmark_json)


@dataclass
class Written:
    """What was written (one line each), what failed, and the history's analyses (for the terminal)."""

    lines: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    analyses: list[Analysis] = field(default_factory=list)


def _why(exc: Exception) -> str:
    return str(getattr(exc, "strerror", None) or exc)


def write_all(doc: dict[str, Any], out: Outputs) -> Written:
    """Write every asked-for output of one run document."""
    w = Written()
    if out.history is not None:
        try:
            paths = append(out.history, doc)
            w.lines.append(f"history: appended this run to {', '.join(str(p) for p in paths)}" if paths else
                           "history: nothing appended (no series)" if not history_rows(doc) else
                           f"history: this night is in {out.history} already (its run ids); nothing appended")
        except HistoryError as exc:
            w.errors.append(f"cannot write --glm5-history: {exc}")
        try:
            runs = for_run(out.history, history_rows(doc).keys()).runs
            w.analyses = analyse(series_of(runs))
        except (HistoryError, OSError) as exc:
            w.errors.append(f"cannot read --glm5-history back: {exc}")
    if out.report is not None:
        try:
            exports.write_text(out.report, json.dumps(doc, indent=2, default=str))
        except OSError as exc:
            w.errors.append(f"cannot write --glm5-report {out.report}: {_why(exc)}; the summary above is all there is "
                            "of this run")
    if out.html is not None:
        note = ("" if out.history is not None else
                "No history: run with --glm5-history DIR to see trends and change points.")
        try:
            size = htmlpage.write(out.html, doc, [a.to_dict() for a in w.analyses], note)
            w.lines.append(f"html: {out.html} ({size / 1024:.0f} KiB)")
        except OSError as exc:
            w.errors.append(f"cannot write --glm5-html {out.html}: {_why(exc)}")
    html_name = out.html.name if out.html is not None else None
    text = markdown.render(doc, html_name) if out.markdown or out.step_summary else ""
    if out.markdown is not None:
        try:
            exports.write_text(out.markdown, text)
            w.lines.append(f"markdown: {out.markdown} ({len(text.encode()) / 1024:.1f} KiB)")
        except OSError as exc:
            w.errors.append(f"cannot write --glm5-markdown {out.markdown}: {_why(exc)}")
    if out.step_summary is not None:
        try:
            with out.step_summary.open("a", encoding="utf-8") as fh:
                fh.write(text)
            w.lines.append(f"markdown: appended to $GITHUB_STEP_SUMMARY ({len(text.encode()) / 1024:.1f} KiB)")
        except OSError as exc:
            w.errors.append(f"cannot append to $GITHUB_STEP_SUMMARY {out.step_summary}: {_why(exc)}")
    for fmt, path in out.exports:
        try:
            exports.export(doc, fmt, path)
            w.lines.append(f"export: {fmt} {path}")
        except OSError as exc:
            w.errors.append(f"cannot write --glm5-export {fmt}:{path}: {_why(exc)}")
    if out.benchmark_json is not None and doc["verdicts"]:
        try:
            exports.write_json(out.benchmark_json, exports.pytest_benchmark(doc))
            w.lines.append(f"--benchmark-json: {out.benchmark_json} (pytest-benchmark's format; the glm5 results, as "
                           "pytest-benchmark had none)")
        except OSError as exc:
            w.errors.append(f"cannot write --benchmark-json: {exc.strerror or exc}")
    return w
