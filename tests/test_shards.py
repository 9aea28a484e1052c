"""--glm5-shard I/N and `glm5 merge`: shards run as separate processes, joined into the verdicts one unsharded
run gives."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from plugin_helpers import HARDWARE, said_lines, write_configs

from pytest_glm5.scaleout import assign
from pytest_glm5.settings import parse_shard

CONFIGS = "".join(f"[config.{c}]\nflags = {{}}\n" + ('compare_to = "a"\n' if c != "a" else "") for c in "abc")
POINTS = """
import pytest

@pytest.mark.parametrize("c", [1])
def test_point(perf, glm5_config, c):
    results = perf.run(f"c{c}", concurrency=c, num_prompts=4 * c, input_len=8, output_len=16, warmup=1)
    perf.check(results, f"c{c}", ["output_throughput"])

def test_plain():
    pass
"""


def verdict_set(doc: dict) -> set[tuple[str, str, str, str]]:  # type: ignore[type-arg]
    return {(v["config"], v["scenario"], v["metric"], v["verdict"]) for v in doc["verdicts"]}


@pytest.mark.slow
def test_shards_merged_give_the_unsharded_verdicts(pytester: pytest.Pytester) -> None:
    model = write_configs(pytester, CONFIGS)
    pytester.makepyfile(POINTS)
    # One-launch bounds with a wide tolerance: every verdict is a deterministic pass, so the sets must be equal.
    store = pytester.path / "baselines" / HARDWARE / f"{Path(model).name}.toml"
    store.parent.mkdir(parents=True)
    store.write_text("[defaults]\ntolerance = 0.5\n")
    recorded = pytester.runpytest_subprocess("--update-baselines")
    assert recorded.ret == 0, recorded.stdout.str()
    whole = pytester.runpytest_subprocess("--glm5-report", "whole.json")
    assert whole.ret == 0, whole.stdout.str()
    shards = []
    for i in (1, 2):
        # Each shard on a machine of its own: its own pytest cache (and no durations shared between them).
        r = pytester.runpytest_subprocess("--glm5-shard", f"{i}/2", "--glm5-report", f"s{i}.json", "-o",
                                          f"cache_dir=cache{i}")
        assert r.ret == 0, r.stdout.str()
        said_lines(r, [f"glm5: shard {i}/2: * of 3 configs (*; balanced by tests per config, the same split on every "
                       "machine)"])
        shards.append(pytester.path / f"s{i}.json")
    docs = [json.loads(p.read_text()) for p in shards]
    configs = [{v["config"] for v in d["verdicts"]} for d in docs]
    assert configs[0].isdisjoint(configs[1]) and configs[0] | configs[1] == {"a", "b", "c"}
    merged = subprocess.run([sys.executable, "-m", "pytest_glm5.cli", "merge", *map(str, shards), "--configs",
                             "configs.toml", "--report", "merged.json"], cwd=pytester.path, capture_output=True,
                            text=True, timeout=120)
    assert merged.returncode == 0, merged.stdout + merged.stderr
    assert "; any false alarm among them held to 0.01" in merged.stdout
    joined = json.loads((pytester.path / "merged.json").read_text())
    unsharded = json.loads((pytester.path / "whole.json").read_text())
    assert verdict_set(joined) == verdict_set(unsharded)
    # compare_to across shards: b and c against a, whichever shard a ran in
    assert {(v["config"], v["scenario"]) for v in joined["versus"]} == {
        (c, "c1") for c in "bc"}
    # one config in two reports is refused
    twice = subprocess.run([sys.executable, "-m", "pytest_glm5.cli", "merge", str(shards[0]), str(shards[0])],
                           cwd=pytester.path, capture_output=True, text=True, timeout=120)
    assert twice.returncode == 2 and f"ran in two shards ({shards[0]} and {shards[0]})" in twice.stderr
    # a shard's report missing is said, with the configs no report covers
    alone = subprocess.run([sys.executable, "-m", "pytest_glm5.cli", "merge", str(shards[0])], cwd=pytester.path,
                           capture_output=True, text=True, timeout=120)
    missing = sorted({"a", "b", "c"} - configs[0])
    assert alone.returncode == 2 and f"config {missing[0]} was in no shard's report" in alone.stderr, alone.stderr
    # reports of another machine are not joined
    other = json.loads(shards[1].read_text())
    for v in other["verdicts"]:
        v["provenance"]["hardware"] = "8x-h200-sm90"
    (pytester.path / "other.json").write_text(json.dumps(other))
    mixed = subprocess.run([sys.executable, "-m", "pytest_glm5.cli", "merge", str(shards[0]), "other.json"],
                           cwd=pytester.path, capture_output=True, text=True, timeout=120)
    assert mixed.returncode == 2 and "shard reports of different hardware or models" in mixed.stderr, mixed.stderr
    assert "Traceback" not in twice.stderr + alone.stderr + mixed.stderr


@pytest.mark.slow
def test_every_machine_splits_alike_whatever_its_cache_holds(pytester: pytest.Pytester) -> None:
    # At c979bd9 each machine balanced by its own cache's durations: after one night each knew only its own shard's,
    # so the next night could run a config on both shards and another on none.
    write_configs(pytester, CONFIGS)
    pytester.makepyfile(POINTS)
    for k, durations in ((1, {"a": 900.0, "b": 1.0, "c": 1.0}), (2, {"a": 1.0, "b": 1.0, "c": 900.0})):
        cache = pytester.path / f"cache{k}" / "v" / "glm5"
        cache.mkdir(parents=True)
        (cache / "config-durations").write_text(json.dumps(durations))
    mine = []
    for i in (1, 2):
        r = pytester.runpytest_subprocess("--glm5-shard", f"{i}/2", "--collect-only", "-q", "-o",
                                          f"cache_dir=cache{i}")
        line = next(x for x in r.stdout.lines if x.startswith(f"glm5: shard {i}/2:"))
        mine.append(set(line.split("(", 1)[1].split(";")[0].split(", ")) - {"none"})
    assert mine[0].isdisjoint(mine[1]) and mine[0] | mine[1] == {"a", "b", "c"}, mine


def test_the_split_is_by_config_deterministic_and_balanced() -> None:
    names = [f"cfg{i}" for i in range(7)]
    durations = {"cfg0": 600.0, "cfg1": 100.0, "cfg2": 100.0, "cfg3": 100.0, "cfg4": 100.0, "cfg5": 100.0}
    split = assign(names, durations, 2)
    assert split == assign(list(reversed(names)), durations, 2)  # the same in every shard
    load = {k: sum(durations.get(n, 183.33) for n in names if split[n] == k) for k in (1, 2)}
    assert abs(load[1] - load[2]) <= 200 and split["cfg0"] != split["cfg1"]
    assert set(assign(names, {}, 3).values()) == {1, 2, 3}
    assert parse_shard("2/4") == (2, 4)
    for bad in ("0/2", "3/2", "a/b", "2", "1/0"):
        with pytest.raises(ValueError, match="must be I/N"):
            parse_shard(bad)
