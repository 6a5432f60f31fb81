"""The session API in a loop of the user's (docs/examples/own_loop/train_session.py), run
as a script task on 2 local workers: preempted mid-run it ends with the uninterrupted
run's digest; its checkpoint resumes on 1 worker; a hung rank is named by the watchdog.

Every run is `jzk train job.entry=...` from a project folder outside the checkout, with
the installed toolkit, as a user runs it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest
import torch

from tests.distributed.conftest import REPO
from tests.distributed.test_script_tasks import stop_at
from tests.distributed.test_your_model import finish, start

# 2 ranks (suite time: each rank of a script is an interpreter of its own). The bit for
# bit resume on 3+ ranks, where DDP's bucket layout sets the order of the sums
# (distributed/ddp_buckets.py), is the same script's on Slurm, 2 nodes x 2 tasks, under 12
# faults: tests/slurm/test_rehearse_slurm.py.
SESSION = ("job.entry=train_session.py", "resources.gpus_per_node=2")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "my-loop"
    shutil.copytree(
        REPO / "docs" / "examples" / "own_loop",
        folder,
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    return folder


def digest(out: str) -> str:
    found = re.search(r"done: \d+ steps, model digest (\w+)", out)
    assert found, out
    return found.group(1)


@pytest.mark.timeout(300)
def test_a_session_loop_resumes_exactly_and_on_another_world_size(project: Path) -> None:
    runs = project.parent / "runs"
    straight = finish(
        start(project, *SESSION, "job.args=[--steps,40]", f"job.run_dir={runs / 'straight'}")
    )
    assert straight.returncode == 0, straight.stderr[-3000:]
    # Its first line says what started its ranks: the toolkit's task, not torchrun.
    assert "jzk session: 2 rank(s) (job.entry task), device cpu" in straight.stdout

    # The same 40 steps, slower, stopped by SIGUSR1 once step 10 is logged.
    cut = ("job.args=[--steps,40,--step-seconds,0.05]", f"job.run_dir={runs / 'cut'}")
    proc = start(project, *SESSION, *cut)
    lines = stop_at(proc, "step 10/40")
    assert proc.returncode == 3, (lines, proc.stderr.read()[-3000:])
    assert any("SIGUSR1 received: stopping after step" in line for line in lines), lines
    saved = int(re.search(r"stopped by SIGUSR1 after saving step-(\d+)", "".join(lines))[1])
    assert 10 <= saved < 40
    shutil.copytree(runs / "cut", runs / "other")

    # Resumed on the same 2 workers: bit for bit the uninterrupted run (it was 1e-8 apart
    # before the resumed session laid its buckets out as the uninterrupted run did).
    resumed = finish(start(project, *SESSION, *cut))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"(step {saved})" in resumed.stdout
    assert digest(resumed.stdout) == digest(straight.stdout)

    # Resumed on 1 worker: the same samples a step (32, the model resharded); the
    # gradients sum in another order, so equal within float32 rounding, not bitwise.
    # Without the pretend work: an option declared as not the run's identity.
    one = finish(
        start(
            project,
            "job.entry=train_session.py",
            "resources.gpus_per_node=1",
            "job.args=[--steps,40]",
            "job.args_may_change=[--step-seconds]",
            f"job.run_dir={runs / 'other'}",
        )
    )
    assert one.returncode == 0, one.stderr[-3000:]
    assert "saved on 2 rank(s)" in one.stdout and f"(step {saved})" in one.stdout
    a = torch.load(runs / "straight" / "model_final.pt", weights_only=True)
    b = torch.load(runs / "other" / "model_final.pt", weights_only=True)
    assert a.keys() == b.keys()
    worst = max(float((a[k] - b[k]).abs().max()) for k in a)
    assert worst < 1e-5, worst


HUNG_LOOP = """
import os, time
import torch
from torch import nn
from jeanzay_kit import session

with session(steps=100, stall_seconds=6, heartbeat_seconds=0.5) as s:
    model = s.wrap(nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(100):
        if s.rank == 1 and step == 5:
            time.sleep(600)  # stuck in its own code: the other rank waits in a collective
        loss = model(torch.randn(8, 4)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        time.sleep(0.05)
        if s.should_stop(step, loss=loss):
            s.requeue_and_exit()
"""


@pytest.mark.timeout(180)
def test_a_hung_rank_in_a_session_loop_is_named_by_the_watchdog(tmp_path: Path) -> None:
    project = tmp_path / "hung"
    project.mkdir()
    (project / "loop.py").write_text(textwrap.dedent(HUNG_LOOP))
    run_dir = tmp_path / "run"
    done = finish(
        start(
            project,
            "job.entry=loop.py",
            "resources.gpus_per_node=2",
            f"job.run_dir={run_dir}",
        )
    )
    assert done.returncode == 1, done.stderr[-3000:]
    named = r"hang: rank 1 .* no progress for \d+ s, at step 5/100 in phase own_step"
    assert re.search(named, done.stderr), done.stderr[-3000:]
    (report,) = run_dir.glob("hang-*/report.txt")
    assert report.read_text().startswith("rank 1 ")
    # Both ranks' Python stacks: rank 1's shows where it sleeps.
    assert 'hung/loop.py", line 12 in <module>' in (report.parent / "rank-1.txt").read_text()


def test_the_session_example_is_what_the_docs_diff(project: Path) -> None:
    """docs/your-own-loop.md shows the diff from train_plain.py to train_session.py: it
    must be the diff of the files the tests run."""
    diff = subprocess.run(
        ["diff", "-u", "train_plain.py", "train_session.py"],
        cwd=project,
        capture_output=True,
        text=True,
    ).stdout
    body = [line for line in diff.splitlines()[2:]]  # without the two file headers
    page = (REPO / "docs" / "your-own-loop.md").read_text()
    shown = page.split("```diff\n", 1)[1].split("```", 1)[0].splitlines()
    assert shown == body
