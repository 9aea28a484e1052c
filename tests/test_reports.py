"""What people read after a run, through real pytest sessions on the emulator: the history and its change points,
the markdown summary, JUnit properties (checked against the schemas), the exports (checked against their formats'
schemas, and read back by `pytest-benchmark compare`), targets."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import xmlschema
from plugin_helpers import HARDWARE, said_lines, write_configs
from report_docs import big_doc

from pytest_glm5.cli import main as glm5
from pytest_glm5.report import htmlpage, markdown
from pytest_glm5.report.history import append, load, store_path

SCHEMAS = Path(__file__).parent / "schemas"
POINTS = """
import pytest

@pytest.mark.server_config("t")
@pytest.mark.parametrize("c", [1, 4])
def test_point(perf, c):
    results = perf.run(f"c{c}", concurrency=c, num_prompts=4 * c, input_len=8, output_len=16, warmup=1)
    perf.check(results, f"c{c}", ["output_throughput", "p99_itl_ms"])
"""
NOISE = ("--glm5-sim-noise", "0.02")


def page_data(path: Path) -> dict[str, Any]:
    """The JSON block of a --glm5-html page."""
    m = re.search(r'<script id="glm5-data" type="application/json">(.*?)</script>', path.read_text(), re.S)
    assert m, "no data block in the page"
    data: dict[str, Any] = json.loads(m.group(1).replace("<\\/", "</"))
    return data


def outputs(*extra: str) -> list[str]:
    return ["--glm5-html", "r.html", "--glm5-history", "h", "--glm5-markdown", "s.md", "--glm5-report", "report.json",
            "--glm5-export", "customBiggerIsBetter:big.json", "--glm5-export", "customSmallerIsBetter:small.json",
            "--glm5-export", "bencher:bmf.json", "--glm5-export", "pytest-benchmark:pb.json", *extra]


@pytest.mark.slow
def test_two_nights_then_a_slower_one_in_every_output(pytester: pytest.Pytester,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    write_configs(pytester, "[config.t]\nflags = {}\n")
    pytester.makepyfile(POINTS)
    summary = pytester.path / "step-summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    first = pytester.runpytest("--update-baselines", "--glm5-launches", "3", "--glm5-max-repeats", "3", *NOISE,
                               *outputs())
    assert first.ret == 0, first.stdout.str()
    baselines = next((pytester.path / "baselines").rglob("*.toml"))
    text = baselines.read_text()
    entry = "[t.c1.output_throughput]\n"
    assert entry in text
    baselines.write_text(text.replace(entry, entry + "target = 100000\n"))  # far out of reach: must never fail
    same = pytester.runpytest(*NOISE, *outputs())
    assert same.ret == 0, same.stdout.str()
    said_lines(same, ["targets (1; never fail a run):",
                               "  t c1 output_throughput * tok/s, floor *: target 100000.00 tok/s: *x to go",
                               f"glm5 history: appended this run to *h/{HARDWARE}/*.jsonl",
                               "glm5 html: *r.html (* KiB)", "glm5 markdown: *s.md (* KiB)",
                               "glm5 markdown: appended to $GITHUB_STEP_SUMMARY (* KiB)"])
    slow = pytester.runpytest("--glm5-sim-slowdown", "0.7", *NOISE, *outputs())
    assert slow.ret == 1, slow.stdout.str()
    said_lines(slow, ["  t c1 output_throughput * tok/s, floor *: target 100000.00 tok/s: *x to go, "
                               "-*% per run (not heading there)"])

    store = next((pytester.path / "h").rglob("*.jsonl"))
    runs = load(store).runs
    assert len(runs) == 3 and all(r["commit"] and r["time"] and r["build"] for r in runs)
    c1 = [next(s for s in r["series"] if s["scenario"] == "c1" and s["metric"] == "output_throughput") for r in runs]
    assert c1[2]["value"] < 0.85 * c1[1]["value"] and len(c1[0]["launches"]) == 3

    data = page_data(pytester.path / "r.html")
    assert data["counts"]["regression"] >= 1 and data["verdicts"][0]["verdict"] == "regression"
    hist = {(s["s"], s["m"]): s for s in data["history"]["series"]}
    values = hist[("c1", "output_throughput")]["values"]
    assert len(values) == 3 and values[2] < 0.85 * values[1]  # the page holds the step
    assert hist[("c1", "output_throughput")]["target"] == 100000
    [cfg] = data["configs"]
    assert [p["conc"] for p in cfg["sweep"]] == [1, 4] and cfg["dists"][0]["ttft"][0]
    assert "http" not in (pytester.path / "r.html").read_text().split('<script id="glm5-data"')[0].lower().replace(
        "http://www.w3.org", "")  # nothing to fetch: no URL outside the data block but SVG's namespace

    md = (pytester.path / "s.md").read_text()
    assert md.startswith("## glm5: ") and "regression" in md.splitlines()[0]
    assert md.index("### Regressions") < md.index("<details>")
    assert summary.read_text().count("## glm5: ") == 3  # appended per run, as GitHub's step summary file expects

    jsonschema.validate(json.loads((pytester.path / "bmf.json").read_text()),
                        json.loads((SCHEMAS / "bmf.schema.json").read_text()))
    gab = json.loads((SCHEMAS / "github-action-benchmark.schema.json").read_text())
    big = json.loads((pytester.path / "big.json").read_text())
    small = json.loads((pytester.path / "small.json").read_text())
    jsonschema.validate(big, gab)
    jsonschema.validate(small, gab)
    assert {b["unit"] for b in big} == {"tok/s"} and {b["unit"] for b in small} == {"ms"}
    compare = subprocess.run([str(Path(sys.executable).parent / "pytest-benchmark"), "compare",
                              str(pytester.path / "pb.json")], capture_output=True, text=True, timeout=120)
    assert compare.returncode == 0, compare.stderr
    assert "t[c1]" in compare.stdout and "output_throughput" in compare.stdout


@pytest.mark.parametrize("family", ["xunit1", "xunit2"])
@pytest.mark.slow
def test_junit_properties_valid_under_both_families(pytester: pytest.Pytester, family: str) -> None:
    write_configs(pytester, "[config.t]\nflags = {}\n")
    pytester.makeini(f"[pytest]\nglm5_configs = configs.toml\njunit_family = {family}\n")
    pytester.makepyfile(POINTS)
    # Any warning of the plugin's (junit_family, record_property) is an error; the one about this in-process run
    # re-importing pytest_glm5 is the harness's (it came or not with the order tests ran in), not the plugin's.
    result = pytester.runpytest("--junitxml", "j.xml", "-W", "error::pytest.PytestWarning",
                                "-W", "ignore::pytest.PytestAssertRewriteWarning")
    assert result.ret == 0, result.stdout.str()
    xml = pytester.path / "j.xml"
    schema = xmlschema.XMLSchema(SCHEMAS / ("junit-10.xsd" if family == "xunit2" else "junit-xunit1.xsd"))
    schema.validate(xml)
    if family == "xunit1":
        # Jenkins' legacy readers take them per test case; the xunit2 schema (rightly) refuses that placement.
        with pytest.raises(xmlschema.XMLSchemaValidationError):
            xmlschema.XMLSchema(SCHEMAS / "junit-10.xsd").validate(xml)
    text = xml.read_text()
    prefix = "" if family == "xunit1" else "test_junit_properties_valid_under_both_families.py::test_point[[]1]::"
    for key in ("measured", "bound", "delta", "verdict"):
        name = f"{prefix}glm5.c1.output_throughput.{key}".replace("[[]", "[")
        assert f'name="{name}"' in text, (name, text[:2000])
    assert 'glm5.c1.output_throughput.verdict" value="new"' in text


@pytest.mark.slow
def test_markdown_stays_under_64_kib_with_regressions_first() -> None:
    doc, _ = big_doc(tests=400, nights=3, regressions=300)
    text = markdown.render(doc, "r.html")
    assert len(text.encode()) <= markdown.LIMIT
    assert text.startswith("## glm5: 300 regressions of")
    assert text.index("### Regressions (300)") < text.index("<details>")
    assert "1500 more rows in the HTML report (r.html)" in text
    huge, _ = big_doc(tests=2000, nights=1, regressions=2000)
    cut = markdown.render(huge, "r.html")
    assert len(cut.encode()) <= markdown.LIMIT and cut.startswith("## glm5: 2000 regressions of")
    assert re.search(r"^- \.\.\. and \d+ more in the HTML report \(r.html\)$", cut, re.M), cut[-600:]
    small, _ = big_doc(tests=4, nights=3, regressions=1)
    full = markdown.render(small)
    assert "more" not in full and full.count("\n| ") == len(small["verdicts"]) + 1


@pytest.mark.slow
def test_history_appends_from_two_processes_at_once(tmp_path: Path) -> None:
    code = f"""
import sys
from pathlib import Path
sys.path.insert(0, {str(Path(__file__).parent)!r})
from report_docs import big_doc
from pytest_glm5.report.history import append
doc, _ = big_doc(tests=20, nights=1)
for i in range(40):
    for v in doc["verdicts"]:
        v["provenance"]["commit"] = f"{{sys.argv[1]}}-{{i}}"
    append(Path(sys.argv[2]), doc)
"""
    procs = [subprocess.Popen([sys.executable, "-c", code, tag, str(tmp_path)]) for tag in ("a", "b")]
    assert [p.wait(120) for p in procs] == [0, 0]
    [path] = list(tmp_path.rglob("*.jsonl"))
    st = load(path)
    assert st.skipped == [] and len(st.runs) == 80
    assert sorted(r["commit"] for r in st.runs) == sorted(f"{t}-{i}" for t in "ab" for i in range(40))


def test_glm5_history_prints_change_points_with_commit_and_step(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    big_doc(tests=2, nights=90, step_at=60, root=tmp_path / "h")
    path = next((tmp_path / "h").rglob("*.jsonl"))
    with path.open("a") as fh:
        fh.write('{"time": "torn')  # a run killed mid-write
    assert glm5(["history", str(tmp_path / "h"), "--config", "cfg0", "--metric", "output_throughput"]) == 0
    out, err = capsys.readouterr()
    assert "not a JSON line" in err and ":91:" in err
    assert re.search(r"cfg0 c\d+ output_throughput \(sim-big\): 90 runs, last .* tok/s \([-+]\d+\.\d% on the run "
                     r"before\), trend", out), out
    assert re.search(r"change point at run 61 \(\S+, commit night-60, build base\): -\d+\.\d% \[-\d+\.\d%, "
                     r"-\d+\.\d%\], p \S+: .* -> .* tok/s \(worse\)", out), out
    assert glm5(["history", str(tmp_path / "h"), "--config", "nope"]) == 2
    assert "no series matches --config nope" in capsys.readouterr().err
    assert glm5(["history", str(tmp_path / "missing")]) == 2
    assert "no such history directory" in capsys.readouterr().err


def test_bad_output_options_are_usage_errors(pytester: pytest.Pytester, tmp_path: Path) -> None:
    write_configs(pytester, "[config.t]\nflags = {}\n")
    pytester.makepyfile(POINTS)
    bad = pytester.runpytest("--glm5-export", "junit:x.json")
    assert bad.ret == 4
    # The one bad value, not the list of every --glm5-export given.
    bad.stderr.fnmatch_lines(["*--glm5-export = 'junit:x.json' must be FORMAT:PATH with FORMAT one of "
                              "customBiggerIsBetter, customSmallerIsBetter, bencher, pytest-benchmark*"])
    nodir = pytester.runpytest("--glm5-html", str(tmp_path / "missing" / "r.html"))
    assert nodir.ret == 4
    nodir.stderr.fnmatch_lines(["*--glm5-html */missing/r.html: directory */missing does not exist; create it or pick "
                                "another path"])
    blocked = tmp_path / "file"
    blocked.write_text("")
    hist = pytester.runpytest("--glm5-history", str(blocked / "h"))
    assert hist.ret == 4
    hist.stderr.fnmatch_lines(["*history directory (--glm5-history) */file/h cannot be created: */file is not a "
                               "directory; pick another directory"])
    # --collect-only measures nothing: no page, no summary, no history directory is made.
    assert pytester.runpytest("--collect-only", *outputs()).ret == 0
    assert not any((pytester.path / name).exists() for name in ("r.html", "s.md", "h", "report.json", "bmf.json"))


def test_history_store_per_hardware_and_model(tmp_path: Path) -> None:
    doc, _ = big_doc(tests=2, nights=1)
    assert append(tmp_path, doc) == [store_path(tmp_path, "sim-big", "/models/GLM-5-NVFP4")]
    assert store_path(tmp_path, "8x-rtx", "/m/a b/").name == "a-b.jsonl"  # the name its baselines file has


BENCH = """
import pytest

def test_plain():
    pass

def test_cpu(benchmark):
    benchmark(sum, range(100))
"""


@pytest.mark.slow
def test_pytest_benchmark_counts_perf_tests_as_benchmarks(pytester: pytest.Pytester,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # pytest-benchmark turns itself off in an xdist worker (it reads PYTEST_XDIST_WORKER); the sessions here are not
    # workers, and nothing here is timed.
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    write_configs(pytester, "[config.t]\nflags = {}\n")
    pytester.makepyfile(test_glm5_points=POINTS, test_cpu_bench=BENCH)
    only = pytester.runpytest("--benchmark-only", "-rs")
    assert only.ret == 0, only.stdout.str()
    only.assert_outcomes(passed=3, skipped=1)  # the two perf points and test_cpu run; test_plain is not one
    said_lines(only, ["SKIPPED [[]1] test_cpu_bench.py*: Skipping non-benchmark (--benchmark-only active)."])
    skip = pytester.runpytest("--benchmark-skip", "-rs")
    skip.assert_outcomes(passed=1, skipped=3)
    said_lines(skip, ["SKIPPED [[]2] test_glm5_points.py*: glm5 perf test: a benchmark "
                               "(--benchmark-skip active)"])
    # Both kinds in one --benchmark-json: pytest-benchmark's own entry and ours, which `compare` reads.
    mixed = pytester.runpytest("--benchmark-json", "mixed.json")
    assert mixed.ret == 0
    names = [b["name"] for b in json.loads((pytester.path / "mixed.json").read_text())["benchmarks"]]
    assert "test_cpu" in names and "t[c1]" in names and "t[c4]" in names
    # Only ours: pytest-benchmark would save nothing ("no benchmarks have been run"); the file still comes.
    ours = pytester.runpytest("test_glm5_points.py", "--benchmark-json", "ours.json")
    assert ours.ret == 0
    (pytester.path / "out").mkdir()  # a path with a directory lands there, not in the current one (c979bd9)
    deep = pytester.runpytest("test_glm5_points.py", "--benchmark-json", str(pytester.path / "out" / "deep.json"))
    assert deep.ret == 0 and (pytester.path / "out" / "deep.json").exists()
    assert not (pytester.path / "deep.json").exists()
    said_lines(ours, ["glm5 --benchmark-json: ours.json (pytest-benchmark's format; the glm5 results, as "
                               "pytest-benchmark had none)"])
    compare = subprocess.run([str(Path(sys.executable).parent / "pytest-benchmark"), "compare",
                              str(pytester.path / "ours.json"), str(pytester.path / "mixed.json")],
                             capture_output=True, text=True, timeout=120)
    assert compare.returncode == 0, compare.stderr
    assert "t[c4]" in compare.stdout


@pytest.mark.slow
def test_a_path_option_that_moves_the_rootdir_is_a_usage_error(pytester: pytest.Pytester, tmp_path: Path) -> None:
    write_configs(pytester, "[config.t]\nflags = {}\n")
    pytester.makepyfile(POINTS)
    elsewhere = tmp_path / "h"
    elsewhere.mkdir()
    result = pytester.runpytest("--glm5-history", str(elsewhere))
    assert result.ret == 4
    result.stderr.fnmatch_lines([f"*glm5: pytest took the value of --glm5-history {elsewhere} for a test path and "
                                 f"chose rootdir * so its ini file and configs were not found; write "
                                 f"--glm5-history={elsewhere} (with '=')"])
    assert pytester.runpytest(f"--glm5-history={elsewhere}").ret == 0


def test_markdown_shows_names_and_crash_lines_as_text_not_html() -> None:
    # At c979bd9 a scenario `<img src=x onerror=alert(1)>` or a crash line's `<module>` went into the step summary as
    # raw HTML, which GitHub renders.
    doc = {"verdicts": [{"config": "tp8", "scenario": "<img src=x>", "metric": "output_throughput", "measured": 1.0,
                         "unit": "tok/s", "verdict": "new", "bound": None}],
           "problems": {"ep8": "File \"<module>\" | line 1 *boom*"}, "known_issues": {}}
    text = markdown.render(doc)
    assert "<img" not in text and "&lt;img src=x&gt;" in text
    assert "&lt;module&gt;" in text and "\\*boom\\*" in text and "\\| line 1" in text
    assert "output_throughput" in text  # metric names stay readable in the source


@pytest.mark.slow
def test_the_page_of_6000_verdicts_stays_under_3_mb_and_says_what_it_left_out() -> None:
    # At c979bd9 the page of 6,000 verdicts weighed 5.2 MB.
    doc, analyses = big_doc(tests=1500, nights=3, regressions=50)
    assert len(doc["verdicts"]) == 6000
    data = htmlpage.page_data(doc, analyses)
    assert len(htmlpage.render(doc, analyses).encode()) <= htmlpage.PAGE_BUDGET
    assert len(data["verdicts"]) == 6000  # the table is never cut
    assert all(c["dists"] for c in data["configs"] if any(v["c"] == c["name"] and v["verdict"] == "regression"
                                                         for v in data["verdicts"]))
    assert "Left out to keep this page under 3 MB: latency distributions of" in data["history_note"]


def test_every_output_of_a_small_run_document(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The fast subset's pass over the report wing: the page, each export, JUnit properties, `glm5 compare`, and the
    run document's round trip, from one small document (the slow tests drive each through real sessions)."""
    from pytest_glm5.judge.verdicts import read_report, verdicts_of
    from pytest_glm5.report import exports, junit
    from pytest_glm5.settings import EXPORT_FORMATS

    doc, analyses = big_doc(tests=4, nights=3, regressions=1)
    data = htmlpage.page_data(doc, analyses)
    assert len(data["verdicts"]) == 16 and data["counts"]["regression"] == 1 and data["history"]["series"]
    page = htmlpage.render(doc, analyses)
    assert page.startswith("<!DOCTYPE html>") and "glm5: 1 regression" in page
    assert "<link rel=\"stylesheet\"" not in page and "src=\"http" not in page  # self-contained: nothing is fetched
    for fmt in EXPORT_FORMATS:
        exports.export(doc, fmt, tmp_path / f"{fmt}.json")
        assert json.loads((tmp_path / f"{fmt}.json").read_text())
    (tmp_path / "r.json").write_text(json.dumps(doc))
    verdicts = verdicts_of(read_report(tmp_path / "r.json"), "r.json")
    assert [v.verdict for v in verdicts] == [d["verdict"] for d in doc["verdicts"]]
    props = dict(junit.properties(verdicts[:1]))
    assert any(k.startswith("glm5:") or "output_throughput" in k for k in props), props
    slower = json.loads(json.dumps(doc))
    for v in slower["verdicts"]:
        v["launches"] = [x * 0.8 for x in v["launches"]] if v["metric"] == "output_throughput" else v["launches"]
    (tmp_path / "slower.json").write_text(json.dumps(slower))
    assert glm5(["compare", str(tmp_path / "r.json"), str(tmp_path / "slower.json")]) == 1
    assert "REGRESSION cfg0 c1 output_throughput: DIFFERENT/worse" in capsys.readouterr().out


def test_the_run_has_one_count_of_series() -> None:
    # A rehearsal printed three totals ("resolved: 68 of 83 statistical series (16 client-bound, 52 pass)",
    # "statistical verdicts: 153 series", "81 series decided, 69 not") and counted client-bound points as resolved.
    from pytest_glm5.judge.verdicts import Verdict
    from pytest_glm5.report.outcome import series_total
    from pytest_glm5.report.terminal import summary_lines

    kinds = ["pass"] * 3 + ["client-bound"] * 2 + ["unresolved", "regression", "new"]
    verdicts = [Verdict("c", f"s{i}", "output_throughput", 1.0, None, k) for i, k in enumerate(kinds)]
    assert series_total(verdicts) == \
        "8 series: 4 decided (3 pass, 1 regression), 4 not (2 client-bound, 1 new, 1 unresolved)"
    lines = summary_lines(verdicts, [], None, {}, [], family_size=7, alpha=0.01)
    assert lines[0].startswith("8 series: 4 decided (3 pass, 1 regression), 4 not (2 client-bound, 1 new, 1 "
                               "unresolved); any false alarm among them held to 0.01")
    assert not any(re.search(r"\b(resolved: |statistical verdicts)", line) for line in lines)


TAILS = """
import pytest

@pytest.mark.server_config("t")
@pytest.mark.parametrize("c", [1, 8])
def test_point(perf, c):
    results = perf.run(f"c{c}", concurrency=c, num_prompts=16 * c, input_len=8, output_len=16, warmup=1)
    perf.check(results, f"c{c}", ["output_throughput", "p99_ttft_ms", "p99_itl_ms"])
"""


@pytest.mark.slow
def test_the_page_shows_the_reference_beside_today(pytester: pytest.Pytester) -> None:
    """Recording keeps each scenario's TTFT and ITL distribution; the next run's page draws it beside today's, puts
    each scenario's launches beside the reference launches, and says how many requests a p99 came from."""
    write_configs(pytester, "[config.t]\nflags = {}\n")
    pytester.makepyfile(TAILS)
    quiet = ("--glm5-sim-noise", "0.002")  # launches this alike resolve their references in two
    # Two launches and no recording rounds (up to 12 otherwise, 46 s on 2 cores): what is held is the distributions.
    assert pytester.runpytest("--update-baselines", "--glm5-launches", "2", "--glm5-max-repeats", "2", *quiet).ret == 0
    text = next((pytester.path / "baselines").rglob("*.toml")).read_text()
    # One distribution per scenario and family (not one per metric), rising, 21 points; c1's p99 TTFT from 16
    # requests is not recorded (too few for a p99), so c1 keeps its ITL distribution only.
    cdfs = re.findall(r"^cdf = \[(.*)\]$", text, re.M)
    assert len(cdfs) == 3, text
    for cdf in cdfs:
        xs = [float(x) for x in cdf.split(",")]
        assert len(xs) == 21 and xs == sorted(xs) and xs[0] >= 0 and xs[-1] > 0
    # A file recorded before distributions were kept gains them at the next --update-baselines, bounds unchanged.
    path = next((pytester.path / "baselines").rglob("*.toml"))
    bare = re.sub(r"^cdf = .*\n", "", text, flags=re.M)
    path.write_text(bare)
    # One launch, no rounds. (A budget of 4 s did it while a first launch took about 2 s; beside two busy loops the
    # recorded launch cost 5 s and nothing ran.)
    again = pytester.runpytest("--update-baselines", "--glm5-report", "again.json", "--glm5-launches", "1",
                               "--glm5-max-repeats", "1", *quiet)
    assert again.ret == 0
    # Only from a measurement that was judged: a client-bound one (a busy machine) is the client's distribution.
    judged = json.loads((pytester.path / "again.json").read_text())["verdicts"]
    assert len(judged) == 6, again.stdout.str()[-1500:]
    healthy = {(v["scenario"], v["metric"].split("_")[1]) for v in judged
               if v["verdict"] in ("pass", "unresolved") and v["metric"].split("_")[1] in ("ttft", "itl")}
    kept = re.findall(r"t (c\d) \w+: .* \(bound kept; its (TTFT|ITL) distribution recorded", again.stdout.str())
    assert sorted((c, f.lower()) for c, f in kept) == sorted(healthy)
    assert len(re.findall(r"^cdf = ", path.read_text(), re.M)) == len(healthy)
    assert re.findall(r"^(?:floor|ceiling) = .*$", path.read_text(), re.M) == \
        re.findall(r"^(?:floor|ceiling) = .*$", bare, re.M)
    path.write_text(text)  # the page below reads the first recording's distributions
    assert pytester.runpytest("--glm5-html", "r.html", *quiet).ret == 0
    data = page_data(pytester.path / "r.html")
    (cfg,) = data["configs"]
    assert sorted(s["scenario"] for s in cfg["strips"]) == ["c1", "c8"]
    for s in cfg["strips"]:
        assert len(s["ref"]) >= 2 and len(s["today"]) >= 1 and s["tol"] > 0
        # Changes from the reference's own geometric mean: their logs sum to zero.
        assert abs(sum(math.log1p(x) for x in s["ref"])) < 1e-3
    drawn = {(d["scenario"], key): d["ref_" + key] for d in cfg["dists"] for key in ("ttft", "itl")}
    assert drawn["c1", "ttft"] is None  # not recorded: the page's title says which have none
    for where in (("c1", "itl"), ("c8", "ttft"), ("c8", "itl")):
        xs, ps = drawn[where]
        assert xs == sorted(xs) and ps[-1] == 1.0 and len(xs) >= 2, where
    # c8 judges its p99 TTFT from 128 requests a launch; c1's 16 are too few for a p99 and say so instead.
    rows = {(v["s"], v["m"]): v for v in data["verdicts"]}
    # (A launch each of today's: 128 requests, 128 x 15 gaps; a busy machine's client-bound p99 says it too.)
    ttft, itl = rows["c8", "p99_ttft_ms"], rows["c8", "p99_itl_ms"]
    assert ttft["n"] and ttft["n"] % 128 == 0 and ttft["nw"] == "requests", ttft
    # 128 requests bound no p99 from above; where launches pooled allow a CI, it brackets the pooled p99 it comes with
    # (not the measured value: the geometric mean of each launch's p99, which a CI run once saw just below it).
    assert ttft["ci"] is None or ttft["ci"][0] <= ttft["pc"] <= ttft["ci"][1]
    assert itl["nw"] == "inter-token gaps" and itl["n"] and itl["n"] % (128 * 15) == 0, itl
    assert rows["c1", "p99_ttft_ms"]["verdict"] == "too few requests" and rows["c1", "p99_ttft_ms"]["n"] is None


def test_an_ab_page_puts_build_b_beside_build_a() -> None:
    # As the H200's `--glm5-ab base,slow10` report held it: no bound, the arms in the test.
    v = {"config": "gpu-bound", "scenario": "c8", "metric": "output_throughput", "measured": 54.45, "unit": "tok/s",
         "verdict": "unresolved", "bound": None, "launches": [53.83, 52.61], "samples": [44.1, 63.5, 43.9, 62.9],
         "test": {"describe": "-7.6% [-12.3%, -2.6%]", "launches_a": [57.85, 57.35], "build_a": "base",
                  "build_b": "slow10", "tolerance": 0.02}, "note": "", "workload": {"concurrency": 8}}
    data = htmlpage.page_data({"verdicts": [v], "results": [], "servers": {}})
    (strip,) = data["configs"][0]["strips"]
    assert strip["names"] == ("build base", "build slow10") and strip["tol"] == 0.02
    assert strip["today"][0] < -0.05 and abs(sum(math.log1p(x) for x in strip["ref"])) < 1e-3
