"""`scripts/slurm-local down` while a job runs, then `up`: the nodes come back idle.

Runs last among the Slurm tests (the file name): it stops and starts the session's shared
cluster. A node left drained by the earlier cluster ("Kill task failed" when the daemons
stopped under a job that was still ending) is put back to service by `up`; here the drain
is set by hand, as that failure leaves it, so the test does not depend on a race.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from tests.slurm.cluster import SCRIPT, run, sacct_states, wait_for

pytestmark = pytest.mark.timeout(300)


def _node_states(env: dict[str, str]) -> dict[str, str]:
    out = run(["sinfo", "-h", "-N", "-p", "debug", "-o", "%N %t"], env).stdout
    return dict(line.split() for line in out.splitlines() if line.strip())


def test_up_after_a_down_that_interrupted_a_job_gives_idle_nodes(slurm, tmp_path: Path) -> None:
    state = Path(slurm["SLURM_CONF"]).parents[1]
    job = run(
        [
            "sbatch",
            "--parsable",
            "-N",
            "2",
            f"--output={tmp_path}/stuck-%j.out",
            "--wrap",
            "trap '' TERM; srun sleep 300",
        ],
        slurm,
        tmp_path,
    )
    assert job.returncode == 0, job.stderr
    job_id = job.stdout.strip()
    deadline = time.monotonic() + 60
    while run(["squeue", "-h", "-j", job_id, "-o", "%T"], slurm).stdout.strip() != "RUNNING":
        assert time.monotonic() < deadline, "the job never started"
        time.sleep(0.5)
    drained = run(
        ["scontrol", "update", "nodename=n1", "state=drain", "reason=Kill task failed"], slurm
    )
    assert drained.returncode == 0, drained.stderr

    for action in ("down", "up"):
        done = subprocess.run(
            [str(SCRIPT), action, str(state)], capture_output=True, text=True, timeout=240
        )
        assert done.returncode == 0, done.stdout + done.stderr

    assert _node_states(slurm) == {"n1": "idle", "n2": "idle"}
    assert sacct_states(job_id, slurm) == ["CANCELLED"]
    again = run(["sbatch", "--parsable", "-N", "2", "--wrap", "srun hostname"], slurm, tmp_path)
    assert again.returncode == 0, again.stderr
    wait_for(again.stdout.strip(), slurm, timeout=60)
    assert sacct_states(again.stdout.strip(), slurm) == ["COMPLETED"]
