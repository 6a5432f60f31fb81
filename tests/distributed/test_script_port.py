"""A script task whose job port is taken on the node (another job's listener): its ranks
meet on the next free port of the job's list, every rank alike, and rank 0 says so in one
line; a MASTER_PORT of the user's that is taken is named before the script starts
(node/script_port.py). Two tasks of a fake srun step on this machine, a gloo script that
knows nothing of the toolkit (env:// from torchrun's variables)."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jeanzay_kit.distributed.ranks import candidate_ports, master_port
from tests.distributed.conftest import REPO

SCRIPT = """\
import os
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
total = torch.ones(1) * (dist.get_rank() + 1)
dist.all_reduce(total)
print(f"rank {dist.get_rank()} port {os.environ['MASTER_PORT']} sum {total.item():g}", flush=True)
dist.destroy_process_group()
"""


def taken_job_port() -> tuple[str, socket.socket]:
    """A job id whose port (master_port) this test holds, listening as a job would."""
    for _ in range(50):
        job_id = str(random.randrange(100_000, 900_000))
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind(("0.0.0.0", master_port(job_id)))
        except OSError:
            sock.close()
            continue
        sock.listen()
        return job_id, sock
    raise AssertionError("no free job port to take")


def task(project: Path, job_id: str, rank: int, world: int, **extra: str) -> subprocess.Popen:
    env = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": str(REPO),
        "SLURM_JOB_ID": job_id,
        "SLURM_STEP_ID": "0",
        "SLURM_PROCID": str(rank),
        "SLURM_LOCALID": str(rank),
        "SLURM_NODEID": "0",
        "SLURM_NTASKS": str(world),
        "SLURM_STEP_TASKS_PER_NODE": str(world),
        "SLURM_NNODES": "1",
        "SLURM_JOB_NODELIST": "localhost",
        "SLURM_STEP_NODELIST": "localhost",
        "MASTER_ADDR": "127.0.0.1",
        "JZK_STEP_START": str(int(time.time())),
        **extra,
    }
    command = [sys.executable, "-m", "jeanzay_kit.node.script_task", "--run-dir=run"]
    return subprocess.Popen(
        [*command, "--", sys.executable, "script.py"],
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a failed test ends the task and its script together
    )


def outputs(procs: list[subprocess.Popen]) -> list[tuple[str, str]]:
    try:
        return [p.communicate(timeout=150) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "script.py").write_text(SCRIPT)
    return tmp_path


@pytest.mark.timeout(180)
def test_a_taken_job_port_moves_every_rank_to_the_same_free_one(project: Path) -> None:
    job_id, holder = taken_job_port()
    with holder:
        procs = [task(project, job_id, rank, 2) for rank in (1, 0)]  # rank 1 first
        outs = outputs(procs)
    codes = [p.returncode for p in procs]
    assert codes == [0, 0], outs
    taken, fallback = master_port(job_id), candidate_ports(master_port(job_id))[1]
    for rank, (out, _err) in zip((1, 0), outs, strict=True):
        assert f"rank {rank} port {fallback} sum 3" in out, out
    rank0 = outs[1][0]
    line = f"port {taken} is taken on {socket.gethostname()} (another job on this node?)"
    assert line in rank0 and f"meet on port {fallback} instead" in rank0, rank0


@pytest.mark.timeout(120)
def test_a_taken_master_port_of_the_users_is_named_before_the_script_starts(
    project: Path,
) -> None:
    job_id, holder = taken_job_port()
    with holder:
        port = str(holder.getsockname()[1])
        proc = task(project, job_id, 0, 1, MASTER_PORT=port)
        ((out, err),) = outputs([proc])
    assert proc.returncode == 2, (out, err)
    assert f"port {port} (MASTER_PORT in the job's environment) is taken" in err, err
    assert "HINT: set MASTER_PORT to a free port" in err and "sum" not in out
