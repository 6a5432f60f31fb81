"""A script that saves where it stands, as PyTorch's DDP tutorial (`multinode.py` of
pytorch/examples' ddp-tutorial-series) does: `snapshot.pt` in its working directory,
resumed from when it exists. Run unchanged through `jzk train job.entry=...` on 2 local
workers, in a project of its own: each experiment keeps its snapshot in its own run
directory, none resumes another's or a snapshot left in the project, and a stop says
what the attempt saved, as seen on disk."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

JZK = str(Path(sys.executable).parent / "jzk")

SCRIPT = """
import argparse, os, time
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

parser = argparse.ArgumentParser()
parser.add_argument("total_epochs", type=int)
parser.add_argument("save_every", type=int)
parser.add_argument("--batch_size", type=int, default=32)
parser.add_argument("--sleep", type=float, default=0.0)
args = parser.parse_args()
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model, epochs_run = nn.Linear(8, 1), 0
if os.path.exists("snapshot.pt"):
    snapshot = torch.load("snapshot.pt", weights_only=True)
    model.load_state_dict(snapshot["MODEL_STATE"])
    epochs_run = snapshot["EPOCHS_RUN"]
    print(f"Resuming training from snapshot at Epoch {epochs_run}", flush=True)
ddp = DDP(model)
opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
for epoch in range(epochs_run, args.total_epochs):
    loss = ddp(torch.randn(args.batch_size, 8)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"[GPU{rank}] Epoch {epoch} | Batchsize: {args.batch_size}", flush=True)
    if rank == 0 and epoch % args.save_every == 0:
        torch.save({"MODEL_STATE": model.state_dict(), "EPOCHS_RUN": epoch + 1}, "snapshot.pt")
        print(f"Epoch {epoch} | Training snapshot saved at snapshot.pt", flush=True)
    time.sleep(args.sleep)
dist.destroy_process_group()
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "ddp tutorial"
    root.mkdir()
    (root / "multinode.py").write_text(SCRIPT)
    # What a plain `torchrun multinode.py 5 1` left in the project before: epoch 3.
    torch.save(
        {"MODEL_STATE": torch.nn.Linear(8, 1).state_dict(), "EPOCHS_RUN": 3}, root / "snapshot.pt"
    )
    return root


def jzk_train(project: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [JZK, "train", "job.entry=multinode.py", "resources.gpus_per_node=2", "--", *args],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def finished(proc: subprocess.Popen) -> tuple[int, str]:
    out, _ = proc.communicate(timeout=180)
    return proc.returncode, out


def run_dir_of(out: str) -> Path:
    return Path(re.search(r", run dir (.+)$", out, re.M).group(1))


@pytest.mark.timeout(300)
def test_two_experiments_never_resume_each_other_or_the_projects_snapshot(project: Path) -> None:
    left = (project / "snapshot.pt").read_bytes()
    code, first = finished(jzk_train(project, "4", "1", "--batch_size", "32"))
    assert code == 0, first
    assert "Resuming" not in first and "Epoch 3 | Batchsize: 32" in first
    code, second = finished(jzk_train(project, "4", "1", "--batch_size", "16"))
    assert code == 0, second
    assert "Resuming" not in second and "Epoch 0 | Batchsize: 16" in second
    dirs = {run_dir_of(first), run_dir_of(second)}
    assert len(dirs) == 2
    for run_dir in dirs:
        saved = torch.load(project / run_dir / "cwd" / "snapshot.pt", weights_only=True)
        assert saved["EPOCHS_RUN"] == 4
    assert (project / "snapshot.pt").read_bytes() == left  # the project's own file untouched


@pytest.mark.timeout(300)
def test_a_stopped_script_says_what_it_saved_and_resumes_its_own_snapshot(project: Path) -> None:
    args = ("6", "1", "--batch_size", "8", "--sleep", "1")
    proc = jzk_train(project, *args)
    deadline = time.monotonic() + 120
    snapshots = project / "outputs"
    while not list(snapshots.glob("*/cwd/snapshot.pt")) and time.monotonic() < deadline:
        assert proc.poll() is None
        time.sleep(0.2)
    proc.send_signal(signal.SIGUSR1)  # the launcher passes it on; the script dies of it
    code, out = finished(proc)
    assert code == 3, out
    assert "where it wrote its files" in out and "the next run of this command" in out
    assert "requeue" not in out.lower()
    (own,) = snapshots.glob("*/cwd/snapshot.pt")
    saved = torch.load(own, weights_only=True)["EPOCHS_RUN"]
    code, again = finished(jzk_train(project, *args))
    assert code == 0, again
    # Its own snapshot's epoch (the project's says 3: the test stops it before that).
    assert saved < 3
    assert f"Resuming training from snapshot at Epoch {saved}" in again
    assert f"Epoch {saved} | Batchsize: 8" in again and "Epoch 0 | Batchsize" not in again
    # The same command once more: the run is complete, and it says what happens now.
    code, third = finished(jzk_train(project, *args))
    assert code == 0, third
    assert "ran to its end" in third and "runs the script again in place" in third, third
    assert "another job.run_dir" in third


@pytest.mark.timeout(300)
def test_a_rank_that_dies_at_exit_after_the_work_is_no_failure_here(project: Path) -> None:
    """Issue 65 point 9, locally: rank 1 ran all its epochs, then aborted at exit (torch
    2.13's gloo under load, pytorch/pytorch#190489; here its own atexit handler,
    deterministic). The local launcher lets rank 0 finish, says so, and ends 0; an abort
    while the program still runs stays a failure."""
    at_exit = "if rank == 1:\n    import atexit\n    atexit.register(os.abort)\n"
    (project / "multinode.py").write_text(SCRIPT + at_exit)
    code, out = finished(jzk_train(project, "2", "1"))
    assert code == 0, out
    assert "rank 1 died at exit after the work was done (exit 134): not a failure" in out, out
    assert "Epoch 1 | Batchsize: 32" in out and "were stopped" not in out
    in_program = SCRIPT.replace("dist.destroy_process_group()", "if rank == 1:\n    os.abort()")
    (project / "multinode.py").write_text(in_program)
    code, out = finished(jzk_train(project, "2", "1", "--batch_size", "16"))
    assert code == 1, out
    assert "killed by SIGABRT" in out and "died at exit" not in out, out

    # Stopped by SIGUSR1, which the script handles by exiting 3, rank 1 aborts at exit
    # (a clean-clone run of the suite met it with gloo's own abort): still a stop (exit
    # 3), not a crash (exit 1).
    stops = (
        "import atexit, os, signal, sys\n"
        "signal.signal(signal.SIGUSR1, lambda *_: sys.exit(3))\n"
        "if os.environ.get('RANK') == '1':\n    atexit.register(os.abort)\n"
    )
    (project / "multinode.py").write_text(stops + SCRIPT)
    before = set(project.glob("outputs/*/cwd/snapshot.pt"))
    proc = jzk_train(project, "50", "1", "--batch_size", "8", "--sleep", "0.5")
    deadline = time.monotonic() + 120
    while set(project.glob("outputs/*/cwd/snapshot.pt")) == before:
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.2)
    proc.send_signal(signal.SIGUSR1)
    code, out = finished(proc)
    assert code == 3, out
    assert "rank 1 died at exit after the stop signal (exit 134): not a failure" in out, out
