"""Your own script, unchanged, on local workers (job.entry, node/script_task.py).

docs/examples/own_script/ddp_script.py is a torchrun-style DDP script with its own
argparse and its own checkpoint; it knows nothing of jeanzay_kit. `jzk train
job.entry=ddp_script.py job.args=[...]` starts 2 processes of it with torchrun's
variables (gloo here); SIGUSR1 makes it save and exit 3, and the same command goes on
from its checkpoint to the uninterrupted run's weights.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.distributed.conftest import REPO
from tests.distributed.test_your_model import JZK, finish, start, user_env

EXAMPLE = REPO / "docs" / "examples" / "own_script"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "my-project"
    shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns("__pycache__"))
    return folder


def stop_at(proc: subprocess.Popen, marker: str) -> list[str]:
    """Send SIGUSR1 to the run's whole process group (as Slurm signals every process of
    a step) once a stdout line starts with `marker`; its stdout lines."""
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    deadline = time.monotonic() + 120
    while not any(line.startswith(marker) for line in lines):
        assert time.monotonic() < deadline and proc.poll() is None, lines
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGUSR1)
    proc.wait(timeout=120)
    reader.join(timeout=10)
    return lines


def weights(out: str) -> str:
    found = re.search(r"done: \d+ steps, weights (\w+)", out)
    assert found, out
    return found.group(1)


SCRIPT = ("job.entry=ddp_script.py", "resources.gpus_per_node=2")


@pytest.mark.timeout(300)
def test_an_unchanged_ddp_script_trains_and_resumes_from_its_own_checkpoint(
    project: Path,
) -> None:
    straight = finish(start(project, *SCRIPT, "job.name=straight", "job.args=[--steps,40]"))
    assert straight.returncode == 0, straight.stderr[-3000:]
    assert "2 process(es) of" in straight.stdout and "ddp_script.py --steps 40" in straight.stdout

    # The same 40 steps, a little slower, stopped by SIGUSR1 once step 10 is printed.
    args = ("job.name=cut", "job.args=[--steps,40,--step-seconds,0.1]")
    proc = start(project, *SCRIPT, *args)
    lines = stop_at(proc, "step 10 ")
    assert proc.returncode == 3, (lines, proc.stderr.read()[-3000:])
    (run_dir,) = (project / "outputs").glob("cut-*")
    assert (run_dir / "checkpoint.pt").is_file()

    resumed = finish(start(project, *SCRIPT, *args))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    at = int(re.search(r"resumed at step (\d+)", resumed.stdout).group(1))
    assert 10 <= at < 40
    assert weights(resumed.stdout) == weights(straight.stdout)


@pytest.mark.timeout(120)
def test_a_missing_entry_is_named_before_anything_starts(project: Path) -> None:
    done = finish(start(project, "job.entry=no_such_script.py"))
    assert done.returncode == 2
    assert "job.entry='no_such_script.py' is not a file" in done.stderr


@pytest.mark.timeout(300)
def test_a_plain_single_gpu_script_is_stopped_and_goes_on_from_its_checkpoint(
    tmp_path: Path,
) -> None:
    """docs/examples/own_loop/train_plain.py handles no signal: SIGUSR1 ends it, the run
    ends with 3 ("run again"), and the same command goes on from its last torch.save."""
    project = tmp_path / "plain-project"
    shutil.copytree(REPO / "docs" / "examples" / "own_loop", project)
    args = ("job.entry=train_plain.py", "job.args=[--steps,60,--step-seconds,0.05]")
    proc = start(project, *args, "resources.gpus_per_node=1")
    lines = stop_at(proc, "step 20 ")
    assert proc.returncode == 3, (lines, proc.stderr.read()[-3000:])
    again = finish(start(project, *args, "resources.gpus_per_node=1"))
    assert again.returncode == 0, again.stderr[-3000:]
    at = int(re.search(r"resumed at step (\d+)", again.stdout).group(1))
    assert 20 <= at < 60 and at % 10 == 0
    assert "done: 60 steps" in again.stdout


THREADS = """
import os, torch
print(f"rank {os.environ['RANK']}: {os.environ.get('OMP_NUM_THREADS')} {torch.get_num_threads()}")
"""


@pytest.mark.timeout(120)
@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="a share differs from the user's on 2+ cores")
def test_each_process_takes_its_share_of_the_cores_unless_the_user_says(tmp_path: Path) -> None:
    """As torchrun guards against it and the rendered scripts do on Slurm: two processes
    with a thread per core each fought for the cores (2x slower, docs/your-own-loop.md).
    An OMP_NUM_THREADS of the user's own is theirs."""
    (tmp_path / "threads.py").write_text(THREADS)
    share = max(1, (os.cpu_count() or 1) // 2)
    theirs = "1" if share > 1 else "2"  # torch takes no more threads than cores
    for own, expected in ((None, share), (theirs, int(theirs))):
        env = {**user_env(), **({"OMP_NUM_THREADS": own} if own else {})}
        if own is None:
            env.pop("OMP_NUM_THREADS", None)
        done = subprocess.run(
            [JZK, "train", "job.entry=threads.py", "resources.gpus_per_node=2", f"job.name=t{own}"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=100,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        said = sorted(line for line in done.stdout.splitlines() if line.startswith("rank "))
        assert said == [f"rank {r}: {expected} {expected}" for r in (0, 1)], done.stdout


# A script of the user's whose ranks stop making progress after step 10, printing and
# writing nothing: rank 0 waits in a barrier that rank 1, asleep, never joins.
HANGS_AFTER_10 = """
import os, time

import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
for step in range(1, 1000):
    dist.barrier()
    if rank == 0:
        print(f"step {step}", flush=True)
    if step == 10:
        if rank == 1:
            time.sleep(3600)
        dist.barrier()
    time.sleep(0.05)
"""


@pytest.mark.timeout(300)
def test_a_script_hung_here_is_named_dumped_and_ended_as_on_slurm(tmp_path: Path) -> None:
    """The local launcher watches a script's processes as a Slurm task watches its
    command (tests/slurm/test_script_signals.py): no line printed and no file written
    for watchdog.stall_seconds, and every process's Python stacks are kept, the quiet
    one is named, and the run ends with 4 (a hang), recorded as such."""
    project = tmp_path / "hanging-project"
    project.mkdir()
    (project / "hangs.py").write_text(HANGS_AFTER_10)
    started = time.monotonic()
    done = finish(
        start(
            project,
            "job.entry=hangs.py",
            "resources.gpus_per_node=2",
            "watchdog.stall_seconds=5",
            "watchdog.heartbeat_seconds=1",
        )
    )
    took = time.monotonic() - started
    assert done.returncode == 4, done.stderr[-3000:]
    assert "step 10" in done.stdout and "step 11" not in done.stdout
    assert "the script made no progress for" in done.stderr, done.stderr[-3000:]
    assert "watchdog.stall_seconds=5" in done.stderr
    (run_dir,) = (project / "outputs").glob("*")
    (hang,) = run_dir.glob("hang-*")
    stacks = {p.name: p.read_text() for p in hang.glob("rank-*.txt")}
    assert set(stacks) == {"rank-0.txt", "rank-1.txt"}, stacks
    assert "barrier" in stacks["rank-0.txt"] and "hangs.py" in stacks["rank-0.txt"]
    assert "hangs.py" in stacks["rank-1.txt"], stacks["rank-1.txt"]
    endings = [json.loads(line) for line in (run_dir / "endings.jsonl").read_text().splitlines()]
    assert endings[-1]["kind"] == "hang", endings
    assert took < 120, took  # detected, not waited out by the test's timeout


@pytest.mark.timeout(300)
def test_a_signal_while_a_session_script_starts_is_kept_until_it_can_save(
    tmp_path: Path,
) -> None:
    """The launcher holds a stop signal until each process of a session loop has
    installed its handler (its first heartbeat): sent while the processes import torch,
    it stops the loop after a save, as the toolkit's own loop does (test_resume.py),
    instead of killing it unsaved."""
    project = tmp_path / "session-project"
    shutil.copytree(REPO / "docs" / "examples" / "own_loop", project)
    args = ("job.entry=train_session.py", "job.args=[--steps,40]", "resources.gpus_per_node=2")
    proc = start(project, *args)
    assert proc.stdout is not None
    for line in proc.stdout:  # the launcher has started the processes: signal it now
        if "process(es) of" in line:
            break
    os.kill(proc.pid, signal.SIGUSR1)
    done = finish(proc)
    assert done.returncode == 3, done.stderr[-3000:]
    (run_dir,) = (project / "outputs").glob("*")
    endings = [json.loads(line) for line in (run_dir / "endings.jsonl").read_text().splitlines()]
    assert endings[-1]["kind"] == "stopped", endings
    assert "does not handle" not in endings[-1]["evidence"], endings
    assert list((run_dir / "checkpoints").glob("step-*")), "nothing saved"
    again = finish(start(project, *args))
    assert again.returncode == 0, again.stderr[-3000:]
