"""`jzk logs` and `jzk cancel` (issue 43 point 1): a log split into the job's starts, a
job's end as an exit code, and a local run stopped through its lease. The Slurm side is
tested on the local cluster (tests/slurm/test_container.py: a 2-node job requeued once)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from jeanzay_kit.cli import main
from jeanzay_kit.launch.log_rules import exit_code, find_records, pick_start, starts
from jeanzay_kit.rundir.run_directory import RunDir

LOG = (
    "jzk: start 1 of job 42 on n1 at 2026-11-26T10:00:00\n"
    "step 100/300\nSIGUSR1 received: saved step-150 and stopping\n"
    "jzk: start 2 of job 42 on n2 at 2026-11-26T10:01:00\n"
    "resumed from step-150\ndone: 300 steps\n"
)


def test_a_log_splits_into_the_jobs_starts() -> None:
    first, second = starts(LOG)
    assert first.startswith("jzk: start 1") and "SIGUSR1" in first and "resumed" not in first
    assert second.startswith("jzk: start 2") and second.endswith("done: 300 steps\n")
    assert pick_start(LOG, -1) == second and pick_start(LOG, None) == LOG
    assert starts("an old log\nwithout marks\n") == ["an old log\nwithout marks\n"]
    for no_start in (3, 0, -3):  # 0 is no start: the first is 1, the last -1
        with pytest.raises(IndexError, match="the log has 2 start"):
            pick_start(LOG, no_start)


@pytest.mark.parametrize(
    ("state", "code", "want"),
    [("COMPLETED", "0:0", 0), ("FAILED", "2:0", 2), ("CANCELLED", "0:15", 1), ("TIMEOUT", "", 1)],
)
def test_a_jobs_end_is_an_exit_code(state: str, code: str, want: int) -> None:
    assert exit_code(state, code) == want


def test_an_array_jobs_id_finds_all_its_tasks() -> None:
    records = [
        {"job_id": "7_0", "array_job_id": "7"},
        {"job_id": "7_1", "array_job_id": "7"},
        {"job_id": "8"},
    ]
    assert [r["job_id"] for r in find_records(records, "7")] == ["7_0", "7_1"]
    assert find_records(records, "8") == [{"job_id": "8"}]


def test_logs_of_a_submitted_run_by_its_directory(tmp_path: Path, capsys) -> None:
    log = tmp_path / "logs" / "a-42.out"
    log.parent.mkdir()
    log.write_text(LOG)
    run_dir = tmp_path / "outputs" / "a-1"
    run_dir.mkdir(parents=True)
    record = {"job_id": "42", "run_dir": str(run_dir), "log": str(log), "overrides": []}
    (run_dir / "manifest.jsonl").write_text(json.dumps(record) + "\n")
    assert main(["logs", "--attempt", "1", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("jzk: start 1") and "done" not in out


def test_cancel_stops_a_local_run_through_its_lease(tmp_path: Path, capsys) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True
    )
    try:
        run_dir = tmp_path / "run"
        run_dir.mkdir()
        (run_dir / "metrics.jsonl").write_text("")
        lease = {"host": socket.gethostname(), "pid": holder.pid, "job_id": "", "since": 1.0}
        (run_dir / "lease.json").write_text(json.dumps(lease))
        assert main(["cancel", str(run_dir)]) == 0
        assert f"SIGTERM sent to pid {holder.pid}" in capsys.readouterr().out
        assert holder.wait(timeout=10) == -signal.SIGTERM
    finally:
        if holder.poll() is None:
            os.killpg(holder.pid, signal.SIGKILL)


def test_one_point_of_a_slurm_sweep_is_read_as_the_sweep_lists_it(tmp_path: Path, capsys) -> None:
    """`jzk logs|status <one point's run dir>`: the point's job and log come from the
    sweep's manifest, above it (a Hydra app's sweep point writes no train.log), and its
    starts count as restarts (attempts.jsonl, written at each call of the app)."""
    sweep = tmp_path / "multirun" / "app"
    logs = {}
    for num in (0, 1):
        logs[num] = tmp_path / "logs" / f"app-7_{num}.out"
        logs[num].parent.mkdir(exist_ok=True)
        logs[num].write_text(f"jzk: start 1 of job 7_{num}\npoint {num}: epoch 3 of 3\n")
        point = sweep / f"lr-{num}"
        (point / ".hydra").mkdir(parents=True)
        (point / "lease.json").write_text("{}")
    records = [
        {"job_id": f"7_{n}", "run_dir": str(sweep / f"lr-{n}"), "log": str(logs[n]), "num": n}
        for n in (0, 1)
    ]
    (sweep / "manifest.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert main(["logs", str(sweep / "lr-1")]) == 0
    out = capsys.readouterr().out
    assert "point 1: epoch 3 of 3" in out and "point 0" not in out
    for start in (1.0, 2.0):  # preempted once: two calls of the app
        with (sweep / "lr-1" / "attempts.jsonl").open("a") as f:
            f.write(json.dumps({"start": start, "job_id": "7_1", "array_id": "7_1"}) + "\n")
    from jeanzay_kit.launch.run_files import run_progress

    assert run_progress(RunDir.of(sweep / "lr-1"), job_id="7_1").restarts == 1


def test_without_a_target_the_run_that_wrote_last_is_shown(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """`jzk logs` alone, in the project: the run here that wrote last (a user's first
    try after `jzk train`), named on stderr; the others are left out."""
    monkeypatch.chdir(tmp_path)
    for name, line, when in (("old", "old run\n", 1_000), ("new", "new run\n", 2_000)):
        run = RunDir(tmp_path / "outputs" / name)
        run.root.mkdir(parents=True)
        run.metrics.write_text('{"step": 1}\n')
        run.train_log.write_text(line)
        for place in (run.metrics, run.train_log, run.root):
            os.utime(place, (when, when))
    assert main(["logs"]) == 0
    out, err = capsys.readouterr()
    assert out == "new run\n", out
    assert "outputs/new, the run here that wrote last" in err, err


@pytest.mark.parametrize(
    ("command", "said"),
    [
        ("jzk train", "it saves first"),
        ("script train.py", "a script of its own only if it handles the signal"),
    ],
)
def test_a_stop_promises_a_save_only_where_one_is_made(command: str, said: str) -> None:
    """`jzk cancel` and the one-writer refusal: the toolkit's loop saves on the signal, a
    script of its own only if it handles it (a user trial was told 'it saves' of a
    script that saved nothing)."""
    from jeanzay_kit.rundir.lease_rules import LeaseRecord, busy_message, saves_on_stop

    record = LeaseRecord("vm", 7, "", 1.0, 1.0, command=command)
    assert (
        saves_on_stop(record) == said if command == "jzk train" else said in saves_on_stop(record)
    )
    assert said in busy_message("outputs/r", record, 2.0)


def test_err_of_a_local_run_says_it_has_one_log(tmp_path: Path, capsys) -> None:
    """A run on this machine has no .err: `jzk logs RUN --err` says so, and shows its one
    log (a user trial saw the same text twice and no word why)."""
    run = RunDir(tmp_path / "run")
    run.root.mkdir()
    run.metrics.write_text("")
    run.train_log.write_text("[rank 0] step 1\n")
    assert main(["logs", str(run.root), "--err"]) == 0
    out, err = capsys.readouterr()
    assert out == "[rank 0] step 1\n" and "--err is a Slurm job's .err" in err, err
