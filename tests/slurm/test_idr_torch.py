"""IDRIS's pattern, unchanged, on the local Slurm cluster in both launch modes (issue 54).

docs/examples/idris_ddp/train.py (torch and the real idr_torch only, its data/ and its own
checkpoint.pth), submitted from a project folder of its own onto 2 nodes x 2 GPUs twice
at once: one srun task per GPU (the default, IDRIS's own way: idr_torch reads the step's
SLURM_* variables) and parallel.launcher=torchrun (one task per node: idr_torch reads
torchrun's variables, the workers carrying no step id). Each of the 4 ranks is told its
own rank of 4, the sampler splits the 48 samples four ways every epoch, one
checkpoint.pth in the run's working directory, COMPLETED.

Before issue 54, under torchrun idr_torch read the agents' step (rank 0 or 1 of 2 for
each pair of workers of a node): two worlds of 2, the second one stuck.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.distributed.test_idr_torch import EXAMPLE, check_world, the_one_checkpoint
from tests.slurm.cluster import sacct_states, submit_script, wait_for

pytest.importorskip("idr_torch")
pytestmark = pytest.mark.timeout(600)

SHAPE = ("resources.nodes=2", "resources.gpus_per_node=2", "job.entry=train.py")


def test_idris_pattern_trains_one_world_in_both_launch_modes(slurm, tmp_path: Path) -> None:
    project = tmp_path / "my idris project"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("__pycache__"))
    args = "job.args=[--epochs,3]"
    # The workers of one torchrun share their task's stdout: under PYTHONUNBUFFERED (which
    # sbatch would carry over from this session) print() writes its text and its newline
    # apart, and two workers' lines interleave ("...TorchElasticidr_torch: rank 0").
    env = {k: v for k, v in slurm.items() if k != "PYTHONUNBUFFERED"}
    # Two run directories (two job names); Slurm runs the jobs one after the other on
    # this cluster's 2 CPUs per node.
    jobs = {
        "Slurm": submit_script(project, env, "idrsrun", *SHAPE, args),
        "TorchElastic": submit_script(
            project, env, "idrtorchrun", *SHAPE, args, "parallel.launcher=torchrun"
        ),
    }
    for job_id, _, _ in jobs.values():
        wait_for(job_id, slurm, timeout=300)
    for launcher, (job_id, _, log) in jobs.items():
        out, err = log.read_text(), log.with_suffix(".err").read_text()
        assert sacct_states(job_id, slurm) == ["COMPLETED"], (launcher, err[-3000:])
        check_world(out, 4, launcher)
    the_one_checkpoint(project, *(run_dir for _, run_dir, _ in jobs.values()))
