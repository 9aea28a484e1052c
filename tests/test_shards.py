"""--glm5-shard I/N and `glm5 merge`: shards run as separate processes, joined into the verdicts one unsharded
run gives."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from plugin_helpers import said_lines, write_configs

from pytest_glm5.sharding import assign, parse_shard

CONFIGS = "".join(f"[config.{c}]\nflags = {{}}\n" + ('compare_to = "a"\n' if c != "a" else "") for c in "abc")
POINTS = """
import pytest

@pytest.mark.parametrize("c", [1, 2])
def test_point(perf, glm5_config, c):
    results = perf.run(f"c{c}", concurrency=c, num_prompts=4 * c, input_len=8, output_len=16, warmup=1)
    perf.check(results, f"c{c}", ["output_throughput"])

def test_plain():
    pass
"""


def verdict_set(doc: dict) -> set[tuple[str, str, str, str]]:  # type: ignore[type-arg]
    return {(v["config"], v["scenario"], v["metric"], v["verdict"]) for v in doc["verdicts"]}


def test_shards_merged_give_the_unsharded_verdicts(pytester: pytest.Pytester) -> None:
    model = write_configs(pytester, CONFIGS)
    pytester.makepyfile(POINTS)
    # One-launch bounds with a wide tolerance: every verdict is a deterministic pass, so the sets must be equal.
    store = pytester.path / "baselines" / "sim-tiny-x1" / f"{Path(model).name}.toml"
    store.parent.mkdir(parents=True)
    store.write_text("[defaults]\ntolerance = 0.5\n")
    recorded = pytester.runpytest_subprocess("--update-baselines")
    assert recorded.ret == 0, recorded.stdout.str()
    whole = pytester.runpytest_subprocess("--glm5-report", "whole.json")
    assert whole.ret == 0, whole.stdout.str()
    shards = []
    durations = pytester.path / ".pytest_cache" / "v" / "glm5" / "config-durations"
    balanced_on = durations.read_text()
    for i in (1, 2):
        r = pytester.runpytest_subprocess("--glm5-shard", f"{i}/2", "--glm5-report", f"s{i}.json")
        assert r.ret == 0, r.stdout.str()
        # The next shard splits on the same durations: a shard rewriting them could run a config twice or never.
        assert durations.read_text() == balanced_on
        said_lines(r, [f"glm5: shard {i}/2: * of 3 configs (*; balanced by the last run's durations)"])
        shards.append(pytester.path / f"s{i}.json")
    docs = [json.loads(p.read_text()) for p in shards]
    configs = [{v["config"] for v in d["verdicts"]} for d in docs]
    assert configs[0].isdisjoint(configs[1]) and configs[0] | configs[1] == {"a", "b", "c"}
    merged = subprocess.run([sys.executable, "-m", "pytest_glm5.cli", "merge", *map(str, shards), "--configs",
                             "configs.toml", "--report", "merged.json"], cwd=pytester.path, capture_output=True,
                            text=True, timeout=120)
    assert merged.returncode == 0, merged.stdout + merged.stderr
    assert "statistical verdicts: " in merged.stdout
    joined = json.loads((pytester.path / "merged.json").read_text())
    unsharded = json.loads((pytester.path / "whole.json").read_text())
    assert verdict_set(joined) == verdict_set(unsharded)
    # compare_to across shards: b and c against a, whichever shard a ran in
    assert {(v["config"], v["scenario"]) for v in joined["versus"]} == {
        (c, s) for c in "bc" for s in ("c1", "c2")}
    # one config in two reports is refused
    twice = subprocess.run([sys.executable, "-m", "pytest_glm5.cli", "merge", str(shards[0]), str(shards[0])],
                           cwd=pytester.path, capture_output=True, text=True, timeout=120)
    assert twice.returncode == 2 and "was measured in document 1 and in document 2" in twice.stderr


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
