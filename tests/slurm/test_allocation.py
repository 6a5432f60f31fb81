"""Issue 42 point 4 on the local cluster: inside `salloc -N2`, `jzk train
cluster=slurm_local ...` runs the job as a step of that allocation, on both of its
nodes, and trains to its last step; the step is the allocation's (sacct), not a job of
its own."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.slurm.cluster import JZK, PYTHON, run

pytestmark = pytest.mark.timeout(300)


def test_jzk_train_inside_salloc_runs_as_a_step_on_every_node(slurm, tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    done = run(
        [
            "salloc", "-N2", "--ntasks-per-node=1", "--cpus-per-task=1", "--gres=gpu:1",
            "-p", "debug", "-t", "5",
            JZK, "train", "cluster=slurm_local", "resources.gpus_per_node=1", "train.steps=12",
            "train.eval_every=0", "job.name=inside", f"job.python={PYTHON}",
        ],
        slurm,
        project,
        timeout=240,
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    job = re.search(r"Granted job allocation (\d+)", out).group(1)
    assert f"inside allocation {job}: the job runs as a step on 2 node(s)" in out, out[-3000:]
    (run_dir,) = (project / "outputs").glob("inside-*")
    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["step"] == 12
    steps = run(["sacct", "-n", "-P", "-j", job, "-o", "JobID,NNodes,State"], slurm).stdout
    # The training is a step of the allocation (<job>.0), on its 2 nodes.
    assert any(row.startswith(f"{job}.0|2|COMPLETED") for row in steps.splitlines()), steps
