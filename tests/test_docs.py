"""Every command README.md and docs/ show is run here, so the documentation cannot drift from the code.

`pytest ...` lines run for real from the repo root with --collect-only (options, ini keys, paths, markers and the
configs file are all checked; nothing is launched); `glm5 ...` lines go through the real parsers; scripts must
exist and parse. A command of a kind this file does not know fails the test: add a rule, do not skip it.
"""

from __future__ import annotations

import itertools
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from scriptmods import script

from pytest_glm5.cli import build_parser
from pytest_glm5.sim.args import parse_args as sim_parse_args

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL_FENCES = {"bash", "sh", "shell", "console"}


def shown_commands() -> list[tuple[str, str]]:
    """(where, command) for each command line in the docs' shell code blocks, continuations joined."""
    out: list[tuple[str, str]] = []
    for doc in DOCS:
        fence: str | None = None
        pending = ""
        for n, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            if line.startswith("```"):
                fence = None if fence is not None else line[3:].strip()
                continue
            if fence not in SHELL_FENCES:
                continue
            text = re.sub(r"\s+#\s.*$", "", line).strip()
            if not text or text.startswith("#"):
                continue
            if text.endswith("\\"):
                pending += text[:-1] + " "
                continue
            out.append((f"{doc.name}:{n}", pending + text))
            pending = ""
    return out


COMMANDS = shown_commands()


def test_the_docs_show_the_missions_commands() -> None:
    shown = {cmd for _, cmd in COMMANDS}
    for cmd in ("pytest -m sm120", "pytest -m sm120 --update-baselines", "pytest -m sm120 --glm5-sim",
                "bash scripts/nightly.sh", "bash scripts/test.sh"):
        assert cmd in shown, cmd


@pytest.mark.parametrize(("where", "command"), COMMANDS, ids=[w for w, _ in COMMANDS])
@pytest.mark.slow
def test_shown_command_runs(where: str, command: str, tmp_path: Path) -> None:
    words = shlex.split(command)
    # [VAR=value ...] before the command
    while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
        words = words[1:]
    head = words[0]
    if head == "export":
        assert all(re.match(r"^[A-Z_][A-Z0-9_]*=\S+$", w) for w in words[1:]), command
    elif head == "bash":
        script = ROOT / words[1]
        assert script.is_file(), f"{where}: {script} does not exist"
        subprocess.run(["bash", "-n", str(script)], check=True)
    elif head == "pytest":
        # Collected for real from the repo root: unknown options, ini keys, paths or configs fail here.
        p = subprocess.run([sys.executable, "-m", "pytest", *words[1:], "--collect-only", "-q", "-o",
                            f"cache_dir={tmp_path / 'cache'}", f"--basetemp={tmp_path / 'bt'}"], cwd=ROOT,
                           capture_output=True, text=True, timeout=120)
        assert p.returncode in (0, 5), f"{where}: `{command}` exit {p.returncode}\n{p.stdout[-2000:]}{p.stderr}"
        assert "error" not in p.stderr.lower(), p.stderr
    elif head == "glm5" and words[1] == "sim":
        ns = sim_parse_args(words[2:])
        assert ns.model_path
    elif head == "glm5":
        build_parser().parse_args(words[1:])
    elif head in ("python", "python3") and words[1].startswith("scripts/"):
        assert (ROOT / words[1]).is_file(), f"{where}: {words[1]} does not exist"
        subprocess.run([sys.executable, "-m", "py_compile", str(ROOT / words[1])], check=True)
    elif head in ("pip", "git"):
        pass  # installation and review steps: nothing of ours to check
    else:
        pytest.fail(f"{where}: no rule checks `{command}`; add one to tests/test_docs.py")


def test_docstrings_quote_what_their_code_prints() -> None:
    import doctest

    from pytest_glm5 import metrics, names, words
    from pytest_glm5.correctness import canary
    from pytest_glm5.judge import box, family, held, regime, stats, variance
    from pytest_glm5.load import clock, datasets, servermetrics, trace
    from pytest_glm5.night import plan
    from pytest_glm5.report import terminal, trends
    from pytest_glm5.sim import answers, speculative
    from pytest_glm5.telemetry import energy

    for module in (energy, regime, box, held, terminal, metrics, plan, stats, variance, family, names, trace, clock,
                   canary, answers, speculative, datasets, servermetrics, trends, words):
        result = doctest.testmod(module)
        assert result.attempted and not result.failed, module.__name__


INLINE = re.compile(r"`((?:pytest|glm5|bash scripts/|python scripts/)[^`]*)`")


def inline_commands() -> list[tuple[str, str]]:
    """(where, command) for each whole command README.md names inline in its prose (`pytest -m sm120 ...`)."""
    out = []
    for n, line in enumerate((ROOT / "README.md").read_text(encoding="utf-8").splitlines(), 1):
        # `glm5 sim` alone names a tool; a command has its arguments
        out += [(f"README.md:{n}", m.group(1)) for m in INLINE.finditer(line)
                if "..." not in m.group(1) and (not m.group(1).startswith("glm5") or len(m.group(1).split()) > 2)]
    return out


@pytest.mark.parametrize(("where", "command"), inline_commands(), ids=[w for w, _ in inline_commands()])
@pytest.mark.slow
def test_the_readmes_inline_commands_run(where: str, command: str, tmp_path: Path) -> None:
    test_shown_command_runs(where, command, tmp_path)


OUTPUT_OPTIONS = ("--glm5-report", "--glm5-html", "--glm5-markdown", "--junitxml", "--glm5-history", "--json",
                  "--report", "--html", "--markdown", "--history")


def test_what_the_docs_commands_write_is_ignored_by_git() -> None:
    # A 53 KB .coverage was committed and the README's own examples left out.json, a.json, b.json untracked.
    written = set()
    for _, command in [*COMMANDS, *inline_commands()]:
        words = shlex.split(command)
        for opt, value in itertools.pairwise(words):
            if opt in OUTPUT_OPTIONS and not value.startswith(("/", "$", '"$')):
                written.add(value)
            if opt == "--glm5-export":
                written.add(value.split(":", 1)[1])
    assert written, "no output path found: the rule reads nothing"
    p = subprocess.run(["git", "check-ignore", "--no-index", *sorted(written)], cwd=ROOT, capture_output=True,
                       text=True)
    ignored = set(p.stdout.split())
    assert sorted(written - ignored) == [], "add these to .gitignore"
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    assert not [f for f in tracked if f in (".coverage",) or f.endswith((".pyc", ".tmp"))]


def test_the_readmes_plan_figures_are_the_plans() -> None:
    # The README said "13 configs, 7 tests each" (allreduce-fusion has 5) and wrote the model path as a separate word.
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    [command] = [c for _, c in COMMANDS if "--glm5-plan" in c and "--glm5-budget 8h" in c and "hardware" in c]
    p = subprocess.run([sys.executable, "-m", *shlex.split(command), "-p", "no:cacheprovider"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr
    line = next(x for x in p.stdout.splitlines() if "first launches" in x)
    configs, hours_, fit = re.search(r"(\d+) configs: first launches ([\d.]+ h).*?(\d+) configs fit", line).groups()
    tests = sum(int(x.split()[3]) for x in p.stdout.splitlines()
                if x.startswith("glm5: plan: ") and len(x.split()) > 3 and x.split()[3].isdigit())
    said = " ".join(readme.split())
    assert f"It prices {configs} configs ({tests} tests) at a 30-minute load each: first launches {hours_}, so {fit} " \
           "configs fit in 8 hours" in said


def test_the_readmes_night_figures_are_the_simulations() -> None:
    # The README quotes the simulated nights; the table in docs/night.md is what scripts/simulate_nights.py printed.
    said = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    page = (ROOT / "docs" / "night.md").read_text(encoding="utf-8")
    now = page.split("### With the variance model", 1)[1].split("### Before issue 39", 1)[0]
    rows = {r.split("|")[1].strip(): [c.strip() for c in r.split("|")[2:-1]]
            for r in now.splitlines() if r.startswith("| ")}
    def false(row: list[str]) -> tuple[float, float]:  # "11; 1.22": series newly confirmed; nights with one
        series, nights = row[1].split(";")
        return float(series), float(nights)

    worst = max(false(rows[cv])[0] for cv in ("2%", "5%", "10%"))
    nights = max(false(rows[cv])[1] for cv in ("2%", "5%", "10%"))
    assert rows["2%"][0] == rows["5%"][0] == rows["10%"][0] == "0" and "no night went over budget" in said
    assert f"false regressions stayed at {worst:g} per 100 nights at most ({nights:g} nights in 100 with one" in said
    heavy = next(v for k, v in rows.items() if k.startswith("CV 5%, heavy tail") and "before" not in k)
    assert f"a heavy tail of bad launches reads {false(heavy)[0]:.1f} ({false(heavy)[1]:g} nights in 100)" in said
    assert f"within 2 nights in {rows['2%'][3].split()[0]} of histories at a launch-to-launch CV of 2%" in said
    assert f"within 3 nights in {rows['5%'][3].split()[0]} at CV 5%" in said
    # Real launches resampled: the two seeds' rows of 30 histories of 30 nights each, said as a count of nights.
    # The newest bootstrap draws every unchanged real launch kept in docs/, as the script itself counts them; its
    # second seed is the row after it.
    real = len(script("simulate_nights").real_factors(sorted((ROOT / "docs").glob("gpu_gate_*.json"))))
    keys = list(rows)
    boot = [k for k in keys if k.startswith(f"bootstrap from {real} launches")][-1]
    seed31 = keys[keys.index(boot) + 1]
    cv = re.search(r"CV [0-9.]+%", boot)
    false_nights = round(sum(false(rows[k])[1] for k in (boot, seed31)) * 900 / 100)
    assert seed31.startswith("the same") and "--seed 31" in seed31
    assert cv
    assert f"resampled from {real} real launches of an H200 and an H100 ({cv.group(0)}), {false_nights} false" in said


def test_the_gpu_wheel_list_covers_the_packages_dependencies() -> None:
    # httptools was missing from docs/gpu.md's list while the plugin imports it at load (plugin -> load.client ->
    # transport): the GPU check failed on the image.
    import tomllib

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {re.split(r"[<>=;\[ ]", d, maxsplit=1)[0].strip().lower() for d in deps}
    text = " ".join((ROOT / "docs" / "gpu.md").read_text(encoding="utf-8").split())
    listed = set()
    for head in ("wheels to carry:", "on the GPU image already:"):
        part = text.split(head, 1)[1].split(" - ", 1)[0].split(" It ", 1)[0]
        listed |= {w.strip(" .,").lower() for w in part.split(",")}
    assert sorted(names - listed) == []


def test_the_layout_page_names_every_module() -> None:
    # The README's Layout missed four modules, and a moved module kept its old name there.
    pkg = ROOT / "pytest_glm5"
    modules = {str(p.relative_to(pkg)) for p in pkg.rglob("*.py")}
    text = (ROOT / "docs" / "layout.md").read_text(encoding="utf-8")
    named = set(re.findall(r"`([\w/]+\.py)`", text))
    assert sorted(modules - named) == [], "add these to docs/layout.md"
    beside = {p.name for p in ROOT.glob("*.py")} | {p.name for p in (ROOT / "scripts").glob("*.py")}
    stale = sorted(n for n in named if n not in modules and n not in beside and not n.startswith(("tests/",
                                                                                                   "scripts/")))
    assert stale == [], "docs/layout.md names modules that are not there"


def test_every_test_file_has_a_wing_in_the_testing_page() -> None:
    text = (ROOT / "docs" / "testing.md").read_text(encoding="utf-8")
    files = sorted(p.name for p in (ROOT / "tests").glob("test_*.py"))
    assert [f for f in files if f"`{f}`" not in text] == [], "add them to docs/testing.md's table"
