"""The layout's rules over the whole import graph (../shared/DESIGN.md): the arrows between the wings and the
nevers, one pytest importer below the role plugins, no function-local project import outside the CLI, a thin
plugin.py. The rules are data: a newcomer reads WINGS and MAY to know where a module belongs."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "pytest_glm5"
ROOT = "pytest_glm5"

# Each module's wing: the first matching prefix of its dotted name (under pytest_glm5) wins.
WINGS = [
    ("plugin", "hooks"), ("roles", "hooks"), ("hookspecs", "hooks"),
    ("session", "session"), ("cli", "cli"),
    ("perf", "perf"),
    ("correctness", "correctness"),
    ("servers.engines.sim", "sim-engine"),
    ("servers", "servers"), ("judge", "judge"), ("night", "night"), ("report", "report"), ("load", "load"),
    ("sim", "sim"), ("telemetry", "telemetry"), ("testing", "testing"),
    ("", "base"),  # settings, configs, metrics, spec, proxies, scaleout, textfiles, ...
]
# Which wings a wing may import. Dependencies point one way: hooks -> session -> (perf, night, servers, report) ->
# judge -> (load, telemetry, base); telemetry/ (NVML's numbers) and testing/ (the tiny model) read only the base. The
# judges never read the reports, the books of the nights, the servers or the emulator, and of the load wing only its
# types; the servers never import the load wing; only the emulator's own engine and the CLI import sim.
MAY = {
    "hooks": {"hooks", "session", "perf", "judge", "night", "servers", "report", "load", "base"},
    "cli": {"cli", "session", "perf", "judge", "night", "servers", "report", "load", "base", "sim", "correctness",
            "telemetry"},
    "session": {"session", "perf", "judge", "night", "servers", "report", "load", "base", "correctness", "telemetry"},
    "perf": {"perf", "judge", "servers", "load", "base", "correctness", "telemetry"},
    "report": {"report", "judge", "load", "base"},
    "judge": {"judge", "load", "base", "correctness", "telemetry"},  # the power record, the emulator's hardware key
    "night": {"night", "judge", "base"},  # the books read verdicts and baselines; the judge never reads the books
    "load": {"load", "base"},
    "servers": {"servers", "sim-engine", "base", "telemetry"},  # the engine registry names the emulator's engine
    "sim-engine": {"servers", "base", "sim", "telemetry"},
    "sim": {"sim", "base", "correctness"},  # the emulated model answers the generated questions
    "correctness": {"correctness", "base"},  # questions, grading, the canary rule, McNemar: no HTTP, no judge
    "telemetry": {"telemetry", "base"},  # NVML's numbers: no verdicts, no HTTP, no server
    "testing": {"testing", "base"},  # the tiny model: imported by the tests and the GPU checks, never by the plugin
    "base": {"base"},
}
NEVER = {  # wing -> modules of an allowed wing it still must not import
    "servers": {"metrics"},  # bench_serving's formulas are the load's and the judge's business
    "sim-engine": {"metrics"},
}
ONLY = {  # (wing, wing it imports) -> the one module of that wing it may import
    ("judge", "load"): "load.types",  # the judge reads what a run measured, never the HTTP client
    ("report", "load"): "load.types",
}
PYTEST_IMPORTERS = {"plugin", "roles"}
PLUGIN_MAX_LINES = 350
# The session coordinates; what it grows that computes belongs to a collaborator (servers/machine.py, night/plan.py,
# report/terminal.Summary, ...). It reached 931 lines before the third floor plan.
SESSION_MAX_LINES = 550
# Every module and every function has a cap, so the next gravity well is stopped where it starts: a module past
# MODULE_MAX_LINES holds two jobs, a function past FUNCTION_MAX_LINES holds steps that want names. Today's exceptions
# are listed and may only shrink: an entry back under its cap must leave the list (the test says so).
MODULE_MAX_LINES = 500
FUNCTION_MAX_LINES = 60
MODULES_OVER = {"load.client", "session", "settings"}
FUNCTIONS_OVER = {
    "load.client.LoadRunner._run", "report.markdown.render",
    "report.terminal.summary_lines", "servers.pool.ServerPool.get", "sim.chat.handle_chat",
}


def wing_of(module: str) -> str:
    """The wing of a dotted module name under pytest_glm5 ('' is the package itself)."""
    for prefix, wing in WINGS:
        if module == prefix or module.startswith(prefix + ".") or prefix == "":
            return wing
    raise AssertionError(module)


def _module(path: Path) -> str:
    parts = list(path.relative_to(PKG).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(module: str, is_pkg: bool, node: ast.ImportFrom) -> list[str]:
    if node.level == 0:
        base = node.module or ""
        if not (base == ROOT or base.startswith(ROOT + ".")):
            return []
        base = base.removeprefix(ROOT).lstrip(".")
    else:
        here = module.split(".") if module else []
        pkg = here if is_pkg else here[:-1]
        pkg = pkg[: len(pkg) - (node.level - 1)]
        base = ".".join([*pkg, *([node.module] if node.module else [])])
    if node.module:
        return [base]
    # `from . import a, b`: each name may be a module
    return [f"{base}.{a.name}" if base else a.name for a in node.names]


@functools.cache
def _parse(path: Path, stamp: tuple[int, int]) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def parsed(path: Path) -> ast.Module:
    """The module's syntax tree, parsed once per process while the file stays as it is: the rules below walk every
    module a dozen times, and parsing them each time was most of this file's time."""
    st = path.stat()
    return _parse(path, (st.st_mtime_ns, st.st_size))


def graph() -> dict[str, list[tuple[str, int, bool]]]:
    """module -> [(imported project module, line, at module level)] for every module of the package."""
    out: dict[str, list[tuple[str, int, bool]]] = {}
    for path in sorted(PKG.rglob("*.py")):
        module = _module(path)
        tree = parsed(path)
        top = {id(n) for n in tree.body} | {id(n) for s in tree.body if isinstance(s, ast.If) for n in s.body}
        edges: list[tuple[str, int, bool]] = []
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                for target in _resolve(module, path.name == "__init__.py", node):
                    edges.append((target, node.lineno, id(node) in top))
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name == ROOT or a.name.startswith(ROOT + "."):
                        edges.append((a.name.removeprefix(ROOT).lstrip("."), node.lineno, id(node) in top))
        out[module] = edges
    return out


def _never_hit(wing: str, target: str) -> bool:
    return any(target == n or target.startswith(n + ".") for n in NEVER.get(wing, ()))


def violations(g: dict[str, list[tuple[str, int, bool]]]) -> list[str]:
    """Every import that breaks a rule, as `module:line imports target (why)`."""
    out = []
    for module, edges in g.items():
        wing = wing_of(module)
        for target, line, top in edges:
            there = wing_of(target)
            only = ONLY.get((wing, there))
            if there not in MAY[wing] or _never_hit(wing, target) or (only is not None and target != only):
                why = f"of {there} only {only}" if only is not None and there in MAY[wing] else there
                out.append(f"{module or ROOT}:{line} imports {target or ROOT} ({wing} may not import {why})")
            if not top and wing != "cli":
                out.append(f"{module}:{line} imports {target} inside a function (only the CLI may import lazily)")
    return out


def test_the_import_graph_keeps_the_layout() -> None:
    assert violations(graph()) == []


@pytest.mark.parametrize(("module", "target"), [
    ("judge.gate", "report.terminal"),  # a judge reading the reports
    ("judge.merge", "servers.pool"),  # a judge reading the servers
    ("servers.forensics", "load.types"),  # the servers reading load results
    ("judge.gate", "load.client"),  # the judge importing the HTTP client
    ("load.client", "judge.verdicts"),  # the load client reaching up
    ("report.html", "sim.profile"),  # the emulator outside its engine and the CLI
    ("metrics", "judge.verdicts"),  # the base reaching up
])
def test_a_planted_upward_import_is_caught(module: str, target: str) -> None:
    g = graph()
    g.setdefault(module, []).append((target, 1, True))
    assert [v for v in violations(g) if v.startswith(f"{module}:1 ")], (module, target)


def test_a_planted_lazy_import_is_caught() -> None:
    g = graph()
    g["session"].append(("judge.gate", 99, False))
    assert "session:99 imports judge.gate inside a function (only the CLI may import lazily)" in violations(g)


def test_only_the_hook_modules_import_pytest() -> None:
    importers = set()
    for path in PKG.rglob("*.py"):
        tree = parsed(path)
        names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names |= {(n.module or "").split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        if names & {"pytest", "_pytest", "xdist"}:
            importers.add(_module(path))
    assert importers == PYTEST_IMPORTERS


def test_session_py_only_coordinates() -> None:
    lines = len((PKG / "session.py").read_text(encoding="utf-8").splitlines())
    assert lines <= SESSION_MAX_LINES, f"session.py has {lines} lines: give the job it grew a room of its own"


def test_plugin_py_only_wires() -> None:
    lines = len((PKG / "plugin.py").read_text(encoding="utf-8").splitlines())
    assert lines <= PLUGIN_MAX_LINES, f"plugin.py has {lines} lines: move what it computes into session.py"


def sizes() -> tuple[dict[str, int], dict[str, int]]:
    """Lines of every module, and of every function by its dotted name (`judge.gate.PerfGate._judge`)."""
    modules: dict[str, int] = {}
    functions: dict[str, int] = {}
    for path in sorted(PKG.rglob("*.py")):
        module = _module(path) or ROOT
        text = path.read_text(encoding="utf-8")
        modules[module] = len(text.splitlines())

        def visit(node: ast.AST, prefix: str) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    name = f"{prefix}.{child.name}"
                    if not isinstance(child, ast.ClassDef):
                        functions[name] = (child.end_lineno or child.lineno) - child.lineno + 1
                    visit(child, name)

        visit(parsed(path), module)
    return modules, functions


def oversized(modules: dict[str, int], functions: dict[str, int]) -> list[str]:
    """Every module and function over its cap and not allowed, and every allowance no longer needed."""
    out = [f"{m} has {n} lines (at most {MODULE_MAX_LINES}): give the second job a module of its own"
           for m, n in modules.items() if n > MODULE_MAX_LINES and m not in MODULES_OVER]
    out += [f"{f} has {n} lines (at most {FUNCTION_MAX_LINES}): name its steps as functions"
            for f, n in functions.items() if n > FUNCTION_MAX_LINES and f not in FUNCTIONS_OVER]
    out += [f"{m} is within {MODULE_MAX_LINES} lines now: take it off MODULES_OVER"
            for m in MODULES_OVER if modules.get(m, 0) <= MODULE_MAX_LINES]
    out += [f"{f} is within {FUNCTION_MAX_LINES} lines now: take it off FUNCTIONS_OVER"
            for f in FUNCTIONS_OVER if functions.get(f, 0) <= FUNCTION_MAX_LINES]
    return out


def test_no_module_or_function_grows_past_its_cap() -> None:
    assert oversized(*sizes()) == []


def test_a_planted_oversize_and_a_stale_allowance_are_caught() -> None:
    modules, functions = sizes()
    modules["judge.verdicts"] = MODULE_MAX_LINES + 1
    functions["judge.held.shape"] = FUNCTION_MAX_LINES + 1
    functions["report.markdown.render"] = 10
    found = oversized(modules, functions)
    assert f"judge.verdicts has {MODULE_MAX_LINES + 1} lines (at most {MODULE_MAX_LINES}): give the second job a " \
           "module of its own" in found
    assert any(f.startswith("judge.held.shape has") for f in found)
    assert "report.markdown.render is within 60 lines now: take it off FUNCTIONS_OVER" in found


# Classes that grew into gravity wells keep a cap of their own: the gate judges and keeps its ledger (where a series'
# reference comes from is judge/references.py, whether a figure is the build's speed judge/admission.py).
CLASS_MAX_LINES = {"judge.gate.PerfGate": 200}


def class_sizes() -> dict[str, int]:
    """Lines of every class by its dotted name (`judge.gate.PerfGate`)."""
    out: dict[str, int] = {}
    for path in sorted(PKG.rglob("*.py")):
        module = _module(path) or ROOT
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.ClassDef):
                out[f"{module}.{node.name}"] = (node.end_lineno or node.lineno) - node.lineno + 1
    return out


def over_class_caps(classes: dict[str, int]) -> list[str]:
    """Every capped class past its cap (or gone: the cap names what is there)."""
    return [f"{c} has {classes.get(c)} lines (at most {cap}): give its second job a room of its own"
            for c, cap in CLASS_MAX_LINES.items() if classes.get(c, cap + 1) > cap]


def test_the_capped_classes_stay_within_their_caps() -> None:
    assert over_class_caps(class_sizes()) == []
    planted = {**class_sizes(), "judge.gate.PerfGate": 201}
    assert over_class_caps(planted) == ["judge.gate.PerfGate has 201 lines (at most 200): give its second job a "
                                        "room of its own"]


def test_every_module_has_a_wing_and_every_wing_a_module() -> None:
    wings = {wing_of(m) for m in graph()}
    assert wings == set(MAY), sorted(set(MAY) ^ wings)


def test_the_judge_imports_without_the_load_client() -> None:
    # judge/gate.py imported BenchResult and Workload from the load client, so importing the gate imported aiohttp:
    # in a venv without it, `import pytest_glm5.judge.gate` failed.
    import subprocess
    import sys

    blocker = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("aiohttp", "httptools", "uvloop"):
            raise ImportError(f"{name} is not installed here")
sys.meta_path.insert(0, Block())
import pytest_glm5.judge.gate, pytest_glm5.judge.compare, pytest_glm5.report.outputs
try:
    import pytest_glm5.load.client
except ImportError as exc:
    print("client needs:", exc)
"""
    p = subprocess.run([sys.executable, "-c", blocker], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "client needs: aiohttp is not installed here" in p.stdout  # the blocker bites


VERDICT_WORDS = {"pass", "regression", "improvement", "new", "workload changed", "unresolved", "known cost",
                 "emulator-bound", "client-bound", "too few requests", "throttled"}
WORDS_ALLOWED = {"judge.verdicts": VERDICT_WORDS, "settings": {"new"}, "cli.merge": {"new"}}  # "new": an update mode


def bare_verdict_words(g_paths: list[Path]) -> list[str]:
    """Every string literal in code (docstrings aside) that spells a verdict kind outside the vocabulary module."""
    out = []
    for path in g_paths:
        module = _module(path)
        tree = parsed(path)
        docs = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs \
                    and node.value in VERDICT_WORDS - WORDS_ALLOWED.get(module, set()):
                out.append(f"{module}:{node.lineno} {node.value!r}")
    return out


def test_verdict_kinds_are_spelled_once() -> None:
    # Three spellings lived side by side: Kind, decide.py's aliases "by their old names" and bare strings in 13 files.
    assert bare_verdict_words(sorted(PKG.rglob("*.py"))) == []


def test_a_planted_bare_verdict_word_is_caught(tmp_path: Path) -> None:
    planted = PKG / "report" / "_planted_for_test.py"
    try:
        planted.write_text('def f(v):\n    """A "pass" in a docstring is prose."""\n    return v == "regression"\n')
        assert bare_verdict_words([planted]) == ["report._planted_for_test:3 'regression'"]
    finally:
        planted.unlink()


# The reports read a verdict's typed reason (judge/verdicts.Reason), never its prose: a note taken apart breaks the
# day its wording changes (report/outcome.py split the canary's line, terminal.py the INVALID's tail).
PROSE_READERS = ("report", "cli")
_TAKE_APART = {"split", "rsplit", "startswith", "endswith", "partition", "rpartition", "removeprefix",
               "removesuffix", "find", "rfind", "index", "rindex"}


def _mentions_note(node: ast.AST) -> bool:
    return any((isinstance(n, ast.Attribute) and n.attr == "note") or (isinstance(n, ast.Name) and n.id == "note")
               for n in ast.walk(node))


def note_readers(sources: dict[str, str]) -> list[str]:
    """Every place a report or CLI module takes a note apart: a string method on it, or `... in note`."""
    out = []
    for module, text in sources.items():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in _TAKE_APART and _mentions_note(node.func.value):
                out.append(f"{module}:{node.lineno} .{node.func.attr}() on a note")
            if isinstance(node, ast.Compare) and any(isinstance(op, ast.In | ast.NotIn) for op in node.ops) \
                    and any(_mentions_note(c) for c in node.comparators):
                out.append(f"{module}:{node.lineno} `in` a note")
    return out


def _prose_sources() -> dict[str, str]:
    return {_module(p): p.read_text(encoding="utf-8") for p in sorted(PKG.rglob("*.py"))
            if wing_of(_module(p)) in PROSE_READERS}


def test_no_report_takes_a_note_apart() -> None:
    assert note_readers(_prose_sources()) == []


def test_a_planted_note_reader_is_caught() -> None:
    planted = {"report.x": ("def f(v):\n    a = (v.note or '').startswith('NO BASELINES')\n"
                            "    return 'alone' in v.note\n")}
    assert note_readers(planted) == ["report.x:2 .startswith() on a note", "report.x:3 `in` a note"]
    assert _prose_sources() and all(wing_of(m) in PROSE_READERS for m in _prose_sources())


# docs/layout.md is the map of the tree: each module is listed in the section of its wing (WINGS), so the page and
# this table cannot drift apart. A section titled by a folder holds that folder's wing; the others name theirs here.
LAYOUT_SECTIONS = {"The hooks and the run": {"hooks", "session", "cli"}, "The base": {"base"},
                   "Beside the package": set()}


def misplaced(text: str) -> list[str]:
    """Each module docs/layout.md lists under a section other than its wing's."""
    out: list[str] = []
    allowed: set[str] = set()
    for line in text.splitlines():
        if line.startswith("## "):
            title = line[3:].strip()
            folder = title.split("`")[1].rstrip("/") if title.startswith("`") else None
            allowed = {wing_of(folder.replace("/", "."))} if folder else LAYOUT_SECTIONS.get(title.split(":")[0], set())
            if folder == "servers":
                allowed.add("sim-engine")  # the emulator's engine is listed with the engines it sits beside
            continue
        first = line.split("`")[1] if line.startswith("- `") else ""
        if first.endswith(".py") and (PKG / first).is_file():
            dotted = _module(PKG / first) or ROOT
            if wing_of(dotted) not in allowed:
                out.append(f"{first} (wing {wing_of(dotted)}) is listed under a section of {sorted(allowed)}")
    return out


def test_the_layout_page_lists_each_module_in_its_wing() -> None:
    text = (PKG.parent / "docs" / "layout.md").read_text(encoding="utf-8")
    assert misplaced(text) == []
    planted = text.replace("## `judge/`: verdicts\n", "## `judge/`: verdicts\n- `report/outcome.py`: planted.\n")
    assert misplaced(planted) == ["report/outcome.py (wing report) is listed under a section of ['judge']"]
