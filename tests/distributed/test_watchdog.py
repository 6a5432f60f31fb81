"""Operating a stuck or crashing run (issue 12): the watchdog names a frozen rank, dumps
the live ranks' stacks and the run restarts from its checkpoint; crashes use the same
restart budget. Real worker processes on gloo; the fault is a real SIGSTOP."""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

SLOW_RUN = [
    "resources.gpus_per_node=2",
    "train.steps=40",
    "train.log_every=10",
    "train.eval_every=0",
    "checkpoint.every_steps=10",
    "data._target_=tests.helpers.SlowRegression",
    "+data.delay=0.05",
    "loader.num_workers=1",
    "watchdog.stall_seconds=5",
    "watchdog.heartbeat_seconds=0.5",
]


def _digest(run_dir: Path) -> str:
    return (run_dir / "model_final.sha256").read_text().strip()


def _beat(run_dir: Path, rank: int) -> dict | None:
    try:
        return json.loads((run_dir / "heartbeat" / f"rank-{rank}.json").read_text())
    except (OSError, ValueError):
        return None


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("watchdog") / "reference"
    cmd = [sys.executable, "train.py", *SLOW_RUN, f"hydra.run.dir={run_dir}"]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return run_dir


def _children(pid: int) -> list[int]:
    """The processes `pid` started (its loader workers), as Linux lists them."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(x) for x in (task / "children").read_text().split()]
    return found


@pytest.mark.timeout(300)
@pytest.mark.parametrize("victim", ["rank", "loader_worker"])
def test_a_stopped_worker_is_named_dumped_and_the_run_restarts_to_the_same_model(
    tmp_path: Path, reference: Path, victim: str
) -> None:
    """SIGSTOP of rank 1, or of its DataLoader worker (what a worker that deadlocks at
    its fork looks like: CPython gh-112275, seen in CI): the rank that waits on it is
    named as stuck, and the rank takes its worker with it when it exits, else the stopped
    worker would hold the run's stdout open for ever (seen in CI: the run restarted and
    ended, and its caller waited on its output until killed)."""
    run_dir = tmp_path / "stopped"
    cmd = [sys.executable, "train.py", *SLOW_RUN, f"hydra.run.dir={run_dir}"]
    proc = subprocess.Popen(
        cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    stopped_pid = rank_pid = None
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            beat = _beat(run_dir, 1)
            if beat and beat["step"] >= 15 and beat["phase"] != "done":
                rank_pid = beat["pid"]
                stopped_pid = rank_pid if victim == "rank" else min(_children(rank_pid))
                break
            time.sleep(0.1)
        assert stopped_pid, "rank 1 never reached step 15"
        os.kill(stopped_pid, signal.SIGSTOP)
        stopped_at = time.time()
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
        if stopped_pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(stopped_pid, signal.SIGKILL)
    assert proc.returncode == 0, err[-3000:]
    # Named: the rank, its host and pid, the step and phase it stopped in.
    hang_line = next(line for line in err.splitlines() if "train.py: hang:" in line)
    assert f"rank 1 (host {os.uname().nodename}, pid {rank_pid})" in hang_line
    silent = (
        "has written no heartbeat and made no progress"
        if victim == "rank"
        else "has made no progress"
    )
    assert silent in hang_line
    assert "in phase" in hang_line
    assert "restarting after a hang (1/3)" in err
    assert "resumed from" in out
    hangs = list(run_dir.glob("hang-*"))
    assert len(hangs) == 1
    report = hangs[0] / "report.txt"
    assert f"pid {rank_pid}" in report.read_text()
    # Detected within stall_seconds (5) + 30 s of the stop: the report's write time says when.
    assert report.stat().st_mtime - stopped_at < 5 + 30
    if victim == "loader_worker":  # rank 1 ended it, stopped (state T), as it exited
        dump = (hangs[0] / "rank-1.txt").read_text()
        assert f"its child processes, ended with it: {stopped_pid} (state T)" in dump
    stacks = (hangs[0] / "rank-0.txt").read_text()
    assert "most recent call first" in stacks  # faulthandler's dump of rank 0's threads
    # torch's flight recorder of a live rank: its last collectives, readable by fr_trace.
    recorder = pickle.loads((hangs[0] / "flight_recorder" / "rank_0").read_bytes())
    assert recorder["entries"] and all("profiling_name" in e for e in recorder["entries"])
    # The same model as the run nobody stopped.
    assert _digest(run_dir) == _digest(reference)
    # A finished run starts its budget afresh and keeps the history (jzk status shows it).
    restarts = json.loads((run_dir / "restarts.json").read_text())
    assert restarts["restarts"] == [] and [r["reason"] for r in restarts["history"]] == ["hang"]
    status = subprocess.run(
        [str(Path(sys.executable).parent / "jzk"), "status", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert status.returncode == 0, status.stderr
    header, row = status.stdout.splitlines()[:2]
    column = header.split().index("RESTARTS")  # the columns before it hold no spaces
    assert row.split()[1] == "COMPLETED" and row.split()[column] == "1", status.stdout


@pytest.mark.timeout(300)
def test_a_run_that_always_crashes_stops_after_max_restarts(train_run) -> None:
    run = train_run(
        "crash",
        "resources.gpus_per_node=2",
        "train.steps=200",
        "checkpoint.every_steps=2",
        "data._target_=tests.helpers.FailAfterBatches",
        "+data.fail_rank=1",
        "+data.after=12",
        "preemption.max_restarts=2",
        check=False,
    )
    err = run.result.stderr
    assert run.result.returncode == 1
    # Each attempt completes steps before its crash: a restart is worth it, until the
    # budget is spent.
    assert err.count("restarting after a crash") == 2
    assert "has used its 2 restart(s) (preemption.max_restarts=2" in err
    history = json.loads((run.run_dir / "restarts.json").read_text())["restarts"]
    assert [r["reason"] for r in history] == ["crash", "crash"]
    # The ledger (issue 59): each restart trains again the steps its crashed attempt made
    # past its newest checkpoint, as that attempt's end recorded them (endings.jsonl), and
    # `jzk status --json` counts those and the last attempt's as lost.
    endings = [json.loads(x) for x in (run.run_dir / "endings.jsonl").read_text().splitlines()]
    starts = [json.loads(x) for x in (run.run_dir / "starts.jsonl").read_text().splitlines()]
    past_save = [e["step"] - (e["checkpoint"] or 0) for e in endings]
    assert len(starts) == 3 and len(endings) == 3 and all(n > 0 for n in past_save)
    assert [s["reached_before"] - s["start_step"] for s in starts[1:]] == past_save[:2]
    assert [s["start_step"] for s in starts[1:]] == [e["checkpoint"] for e in endings[:2]]
    status = subprocess.run(
        [str(Path(sys.executable).parent / "jzk"), "status", "--json", str(run.run_dir)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert json.loads(status.stdout)["lost_steps"] == sum(past_save), status.stdout


@pytest.mark.timeout(300)
def test_a_failure_before_any_step_is_reported_once_not_restarted(train_run) -> None:
    run = train_run(
        "early",
        "resources.gpus_per_node=2",
        "train.steps=5",
        "data._target_=tests.helpers.FailOnRank",
        "+data.fail_rank=1",
        "preemption.max_restarts=2",
        check=False,
    )
    err = run.result.stderr
    assert run.result.returncode == 1
    assert "restarting" not in err
    assert err.count("injected failure on rank 1") <= 2  # the rank's traceback, the launcher's
    assert "before completing any step of this attempt: not restarted" in err
    assert not (run.run_dir / "restarts.json").exists()


@pytest.mark.timeout(300)
def test_a_killed_worker_is_named_and_its_peers_say_so_in_one_line(tmp_path: Path) -> None:
    run_dir = tmp_path / "killed"
    cmd = [
        sys.executable,
        "train.py",
        *SLOW_RUN,
        "preemption.max_restarts=0",
        f"hydra.run.dir={run_dir}",
    ]
    proc = subprocess.Popen(
        cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    killed_pid = None
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and killed_pid is None:
            beat = _beat(run_dir, 1)
            if beat and beat["step"] >= 5 and beat["phase"] != "done":
                killed_pid = beat["pid"]
            time.sleep(0.1)
        assert killed_pid, "rank 1 never reached step 5"
        os.kill(killed_pid, signal.SIGKILL)
        _out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err[-3000:]
    line = next(x for x in err.splitlines() if "ended: killed by SIGKILL" in x)
    assert line.startswith(f"train.py: rank 1 (pid {killed_pid} on {os.uname().nodename}) at step ")
    assert line.endswith("; the others were stopped.")
    # Rank 0 lost its peer inside a collective: one line, not a traceback of its own.
    assert "rank 0 stopped: a peer left the job" in err
    assert "rank 0 failed" not in err and "Traceback" not in err
