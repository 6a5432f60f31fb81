"""IDRIS's pattern, unchanged, under `jzk train` (issue 54): docs/examples/idris_ddp/
train.py, written only against torch and the real idr_torch (PyPI's `idr-torch`), in a
project of its own with its data/ and its own checkpoint.pth. Two local processes: each
rank is told a world of 2 and its own rank (idr_torch through torchrun's variables, as
under torchrun), the DistributedSampler splits the 48 samples between them every epoch,
and rank 0 alone writes the one checkpoint.pth, in the run's working directory.

And submitit.JobEnvironment(), the first line of Hydra's submitit example, in a script task
of 2 processes: each finds its own rank (it raised "Could not figure out which
environment the job is runnning in" before).

Before issue 54 both processes saw a world of 1, trained every sample each and wrote one
checkpoint.pth in turn: exit 0. tests/slurm/test_idr_torch.py runs the same script in both
Slurm launch modes.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.distributed.conftest import REPO

pytest.importorskip("idr_torch")

EXAMPLE = REPO / "docs" / "examples" / "idris_ddp"
JZK = str(Path(sys.executable).parent / "jzk")
SAMPLES = 48  # the lines of the example's data/train.csv


def idris_project(tmp_path: Path) -> Path:
    """The example copied into a project folder of its own (a space in its path)."""
    project = tmp_path / "my idris project"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("__pycache__"))
    return project


def check_world(out: str, world: int, launcher: str, epochs: int = 3) -> None:
    """Every rank of `world` was told its own rank and the world's size by idr_torch
    (through `launcher`, idr_torch's name of the API it took), and every epoch the
    ranks trained on disjoint shares that cover the data once."""
    told = re.findall(r"idr_torch: rank (\d+) of (\d+), local rank (\d+), launcher (\w+)", out)
    assert sorted(int(r) for r, _, _, _ in told) == list(range(world)), out[-3000:]
    assert {(int(w), api) for _, w, _, api in told} == {(world, launcher)}, told
    for epoch in range(epochs):
        shares = re.findall(rf"rank (\d+) epoch {epoch} samples ([\d,]+)", out)
        assert sorted(int(r) for r, _ in shares) == list(range(world)), (epoch, out[-3000:])
        seen = [int(i) for _, share in shares for i in share.split(",")]
        assert sorted(seen) == list(range(SAMPLES)), (epoch, shares)
    assert f"done: {epochs} epochs" in out, out[-3000:]


def the_one_checkpoint(project: Path, *run_dirs: Path, epochs: int = 3) -> None:
    """Exactly one checkpoint.pth per run, the run's own (its working directory), holding
    the last epoch; none in the project itself."""
    found = sorted(project.rglob("checkpoint.pth"))
    assert found == sorted(d / "cwd" / "checkpoint.pth" for d in run_dirs), found
    for path in found:
        assert torch.load(path, weights_only=True)["epoch"] == epochs - 1


def test_idris_pattern_splits_the_data_between_two_local_processes(tmp_path: Path) -> None:
    project = idris_project(tmp_path)
    run = subprocess.run(
        [JZK, "train", "job.entry=train.py", "resources.gpus_per_node=2", "--", "--epochs", "3"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    check_world(run.stdout, 2, "TorchElastic")
    (run_dir,) = (project / "outputs").glob("jzk-*")
    the_one_checkpoint(project, run_dir)


def test_submitit_job_environment_works_in_a_script_task(tmp_path: Path) -> None:
    project = tmp_path / "submitit project"
    project.mkdir()
    (project / "where.py").write_text(
        "import submitit\n"
        "env = submitit.JobEnvironment()\n"
        "print(f'submitit: {env.cluster} rank {env.global_rank} of {env.num_tasks}', "
        "flush=True)\n"
    )
    run = subprocess.run(
        [JZK, "train", "job.entry=where.py", "resources.gpus_per_node=2"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    found = sorted(re.findall(r"submitit: (\w+) rank (\d) of (\d)", run.stdout))
    assert found == [("local", "0", "2"), ("local", "1", "2")], run.stdout[-3000:]
