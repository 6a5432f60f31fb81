"""Issue 42 point 4 on the local cluster: inside `salloc -N2`, `jzk train
cluster=slurm_local ...` runs the job as a step of that allocation, on both of its
nodes, and trains to its last step; the step is the allocation's (sacct), not a job of
its own. Two at once stay apart."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from tests.slurm.cluster import JZK, PYTHON, run

pytestmark = pytest.mark.timeout(300)


def test_jzk_train_inside_salloc_runs_as_a_step_on_every_node(slurm, tmp_path: Path) -> None:
    """Two `jzk train` at once in one allocation, as a user debugging two settings does:
    each is a step of its own on both nodes, with its own frozen config and run."""
    project = tmp_path / "project"
    project.mkdir()
    train = [JZK, "train", "cluster=slurm_local", "resources.gpus_per_node=1",
             "train.eval_every=0", f"job.python={PYTHON}"]  # fmt: skip
    both = " & ".join(
        shlex.join([*train, f"train.steps={steps}", f"job.name={name}"])
        for name, steps in (("inside", 12), ("beside", 8))
    )
    done = run(
        ["salloc", "-N2", "--ntasks-per-node=1", "--cpus-per-task=1", "--gres=gpu:1",
         "-p", "debug", "-t", "5", "bash", "-c", f"{both} & wait"],
        slurm,
        project,
        timeout=240,
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    job = re.search(r"Granted job allocation (\d+)", out).group(1)
    said = f"inside allocation {job}: the job runs as a step on 2 node(s)"
    assert out.count(said) == 2, out[-3000:]
    for name, steps in (("inside", 12), ("beside", 8)):
        (run_dir,) = (project / "outputs").glob(f"{name}-*")
        records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
        assert records[-1]["step"] == steps, (name, records[-1])
    # Each step froze its own config (one file per step, none overwritten by the other).
    assert len(list((project / "logs").glob(f"jzk-config-{job}-*.yaml"))) == 2
    rows = run(["sacct", "-n", "-P", "-j", job, "-o", "JobID,NNodes,State"], slurm).stdout
    # The trainings are steps of the allocation (<job>.0, <job>.1), each on its 2 nodes.
    for step in (0, 1):
        assert f"{job}.{step}|2|COMPLETED" in rows, rows
