"""The run directory's lease: the rules as a table, and the edge against real processes
(a holder in another process, a killed holder, a clean release)."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jeanzay_kit.ckpt.writable import save_failure_hint
from jeanzay_kit.errors import RunDirBusy
from jeanzay_kit.rundir.lease import acquire, holder
from jeanzay_kit.rundir.lease_rules import (
    STALE_SECONDS,
    LeaseRecord,
    Verdict,
    busy_message,
    judge,
    parse_record,
)
from jeanzay_kit.rundir.run_directory import RunDir

NOW = 1_800_000_000.0


def rec(**kw) -> LeaseRecord:
    base = dict(host="n1", pid=42, job_id="100", since=NOW - 60, renewed=NOW - 10)
    return LeaseRecord(**{**base, **kw})


@pytest.mark.parametrize(
    ("record", "me_host", "me_job", "alive", "locked", "verdict"),
    [
        (None, "n1", "", False, False, Verdict.FREE),
        (None, "n1", "", False, True, Verdict.HELD),  # locked, record not written yet
        (None, "n1", "", False, None, Verdict.FREE),
        (rec(), "n2", "200", True, False, Verdict.FREE),  # the filesystem's word wins
        (rec(), "n2", "200", True, True, Verdict.HELD),
        (rec(), "n2", "100", True, True, Verdict.OURS),  # a requeue of the holder's job
        (rec(job_id=""), "n2", "", True, True, Verdict.HELD),  # no job: never "ours"
        # Without locks the record decides:
        (rec(), "n2", "200", True, None, Verdict.HELD),
        (rec(released=True), "n2", "200", True, None, Verdict.FREE),
        (rec(host="n2"), "n2", "200", False, None, Verdict.STALE),  # its pid died here
        (rec(renewed=NOW - STALE_SECONDS - 1), "n2", "200", True, None, Verdict.STALE),
    ],
)
def test_the_verdict_table(record, me_host, me_job, alive, locked, verdict) -> None:
    got = judge(record, my_host=me_host, my_job_id=me_job, now=NOW, pid_alive=alive, locked=locked)
    assert got is verdict


def test_a_record_round_trips_and_a_partial_one_is_none() -> None:
    record = rec(command="jzk train", attempt=2, token="t")
    assert parse_record(record.to_json()) == record
    assert parse_record(record.to_json()[:20]) is None
    assert parse_record("") is None


def test_the_refusal_names_the_holder_and_the_ways_out() -> None:
    message = busy_message("/w/run", rec(command="jzk train", attempt=1), NOW)
    for part in ("pid 42 on n1", "Slurm job 100, restart 1", "running jzk train", "60 s ago"):
        assert part in message
    assert "scancel 100" in message and "job.run_dir=" in message
    local = busy_message("/w/run", rec(job_id=""), NOW)
    assert "kill -USR1 42" in local and "scancel" not in local


@pytest.mark.parametrize(
    ("code", "says", "never"),
    [
        (errno.ENOSPC, "raise the quota", "another process"),
        (errno.EDQUOT, "raise the quota", "another process"),
        (errno.ENOENT, "another process writes this run directory", "quota"),
        (errno.ENOTEMPTY, "another process writes this run directory", "quota"),
        (errno.EIO, "EIO", "quota"),
        (errno.EROFS, "EROFS", "free space"),
        (None, "failing rank's error", "quota"),
    ],
)
def test_a_failed_save_names_its_own_cause(code, says, never) -> None:
    hint = save_failure_hint(code, "/w/run")
    assert says in hint and never not in hint


HOLD = """
import sys, time
from pathlib import Path
from jeanzay_kit.rundir.lease import acquire
from jeanzay_kit.rundir.run_directory import RunDir
lease = acquire(RunDir(Path(sys.argv[1])), host="{host}", job_id=sys.argv[2], command="holder")
print("held", flush=True)
time.sleep(600)
"""


def _holder(run_dir: Path, job_id: str = "") -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD.format(host=os.uname().nodename), str(run_dir), job_id],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


@pytest.mark.timeout(60)
def test_a_live_holder_refuses_a_second_writer_and_a_killed_one_does_not(tmp_path: Path) -> None:
    run_dir = tmp_path / "a run"
    proc = _holder(run_dir)
    try:
        record, held = holder(RunDir(run_dir))
        assert held and record is not None and record.pid == proc.pid
        with pytest.raises(RunDirBusy, match=f"pid {proc.pid} on"):
            acquire(RunDir(run_dir), host=os.uname().nodename)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    # SIGKILL: no release written, but the filesystem dropped the lock.
    record, held = holder(RunDir(run_dir))
    assert not held and record is not None and not record.released
    with acquire(RunDir(run_dir), host=os.uname().nodename, command="next") as lease:
        assert lease.locked and lease.record.pid == os.getpid()
    record, held = holder(RunDir(run_dir))
    assert not held and record is not None and record.released


@pytest.mark.timeout(60)
def test_a_requeued_job_takes_over_its_own_lease(tmp_path: Path) -> None:
    """The lock of a lost node may outlive its process for a while: the next attempt of
    the same Slurm job goes on; another job does not."""
    proc = _holder(tmp_path, job_id="77")
    try:
        with pytest.raises(RunDirBusy, match="Slurm job 77"):
            acquire(RunDir(tmp_path), host="elsewhere", job_id="78")
        start = time.monotonic()
        lease = acquire(RunDir(tmp_path), host="elsewhere", job_id="77", attempt=1)
        assert time.monotonic() - start < 5 and not lease.locked
        lease.release()
    finally:
        proc.kill()
        proc.wait()


BLOCKED_MAIN = """
import os, signal, sys, time
from pathlib import Path
from jeanzay_kit.rundir.lease import acquire
from jeanzay_kit.rundir.run_directory import RunDir

lease = acquire(RunDir(Path(sys.argv[1])), host="n1")
# As a script task's main thread between two sigtimedwait calls (node/script_watch.py):
# the stop signal blocked here, its default action unchanged.
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
os.kill(os.getpid(), signal.SIGUSR1)  # to the process, as slurmstepd sends it
time.sleep(0.5)
info = signal.sigtimedwait({signal.SIGUSR1}, 5)
print("taken", info.si_signo if info else None, flush=True)
lease.release()
"""


def test_a_signal_to_the_process_waits_for_the_main_thread_not_the_leases(
    tmp_path: Path,
) -> None:
    """The lease's thread blocks every signal: one sent to the process while its main
    thread blocks it stays pending for that thread (it killed a script task on CI)."""
    done = subprocess.run(
        [sys.executable, "-c", BLOCKED_MAIN, str(tmp_path / "run")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, (done.returncode, done.stderr)
    assert done.stdout.strip() == f"taken {int(signal.SIGUSR1)}", done.stdout
