"""The run directory's lease: one writer at a time. Edge (files, fcntl, a thread).

`acquire` is called once by the process that trains into a run directory (local `jzk
train`, global rank 0 of a Slurm job's step, a script task's task 0), before it loads or
writes anything there; a second writer gets RunDirBusy naming the holder. `holder` lets
another process (`jzk submit`, `jzk status`) ask who holds it. The rules are
lease_rules.py; why a POSIX record lock plus a renewed record: docs/run-directories.md.

A POSIX lock belongs to the process and is dropped when that process closes *any*
descriptor of the file: the holder opens lease.json once and writes through that
descriptor only; readers are other processes.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path

from jeanzay_kit.errors import RunDirBusy
from jeanzay_kit.rundir.lease_rules import (
    RENEW_SECONDS,
    LeaseRecord,
    Verdict,
    busy_message,
    judge,
    parse_record,
)
from jeanzay_kit.rundir.run_directory import RunDir

# A filesystem that does not honour locks says so with one of these (Lustre `noflock`:
# ENOSYS; NFS without a lock manager: ENOLCK); the record alone decides then.
_NO_LOCKS = (errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL)
_HELD = (errno.EACCES, errno.EAGAIN)
# Without locks, two takers of a free directory both write their record: the last one
# wins, and the other sees it when it reads back after this pause.
_SOFT_SETTLE_SECONDS = 0.5


class Lease:
    """A held run directory; `release` (or the process's end) lets it go."""

    def __init__(self, path: Path, fd: int, record: LeaseRecord, locked: bool) -> None:
        self.path, self.record, self.locked = path, record, locked
        self._fd: int | None = fd
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew_loop, name="jzk-lease", daemon=True)
        # Started with every signal blocked, which it keeps: a signal sent to the process
        # is the main thread's. A script task's main thread blocks the stop signals and
        # takes them with sigtimedwait (node/script_watch.py); between two waits the
        # kernel handed a SIGUSR1 to this thread instead, whose default action killed the
        # task (a CI run: "task 0: User defined signal 1"; task 0 holds the lease).
        before = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
        try:
            self._thread.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, before)

    def _write(self, record: LeaseRecord) -> None:
        with self._lock:
            if self._fd is None:
                return
            data = record.to_json().encode()
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, data, 0)
            os.fsync(self._fd)
            self.record = record

    def _renew_loop(self) -> None:
        while not self._stop.wait(RENEW_SECONDS):
            try:
                if not self.locked:  # a requeue's takeover: the lost node's lock may be gone now
                    self.locked = _try_lock(self._fd) is True if self._fd is not None else False
                self._write(replace(self.record, renewed=time.time()))
            except OSError:
                pass  # a filesystem hiccup: the next renewal tries again

    def release(self) -> None:
        """Say the run ended (readers need not judge it) and drop the lock."""
        self._stop.set()
        with contextlib.suppress(OSError):
            self._write(replace(self.record, renewed=time.time(), released=True))
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)  # drops the POSIX lock
                self._fd = None

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _try_lock(fd: int | None) -> bool | None:
    """True: taken; False: another process holds it; None: locks are not honoured here."""
    if fd is None:
        return False
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError as err:
        if err.errno in _HELD:
            return False
        if err.errno in _NO_LOCKS:
            return None
        raise


def _read(fd: int) -> LeaseRecord | None:
    return parse_record(os.pread(fd, 1 << 16, 0).decode(errors="replace"))


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's live process
    return True


def acquire(
    run_dir: RunDir,
    *,
    host: str,
    job_id: str = "",
    attempt: int = 0,
    command: str = "",
) -> Lease:
    """Take `run_dir` for this process, or raise RunDirBusy naming who holds it."""
    run_dir.root.mkdir(parents=True, exist_ok=True)
    path = run_dir.lease
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        got = _try_lock(fd)
        record = _read(fd)
        now = time.time()
        alive = record is not None and record.host == host and pid_alive(record.pid)
        locked = None if got is None else not got
        verdict = judge(
            record, my_host=host, my_job_id=job_id, now=now, pid_alive=alive, locked=locked
        )
        if verdict is Verdict.HELD:
            raise RunDirBusy(busy_message(str(run_dir), record, now))
        mine = LeaseRecord(
            host=host,
            pid=os.getpid(),
            job_id=job_id,
            since=now,
            renewed=now,
            command=command,
            attempt=attempt,
            token=uuid.uuid4().hex,
        )
        lease = Lease(path, fd, mine, locked=got is True)
        lease._write(mine)
        if got is None:
            _settle(lease, run_dir)
        return lease
    except BaseException:
        os.close(fd)  # refused: this process held no lock, closing drops nobody's
        raise


def acquire_for(run_dir: RunDir, env: Mapping[str, str], command: str) -> Lease:
    """`acquire` for this process, its Slurm job and restart read from `env` (the
    mapping the entry point read once)."""
    restarts = env.get("SLURM_RESTART_COUNT", "0")
    return acquire(
        run_dir,
        host=os.uname().nodename,
        job_id=env.get("SLURM_JOB_ID", ""),
        attempt=int(restarts) if restarts.isdigit() else 0,
        command=command,
    )


def _settle(lease: Lease, run_dir: RunDir) -> None:
    """Without locks: read back after a pause; a later taker's record means it won."""
    time.sleep(_SOFT_SETTLE_SECONDS)
    fd = lease._fd
    assert fd is not None
    record = _read(fd)
    if record is not None and record.token != lease.record.token:
        lease._stop.set()
        lease._fd = None  # acquire's caller closes it
        raise RunDirBusy(busy_message(str(run_dir), record, time.time()))


def holder(run_dir: RunDir) -> tuple[LeaseRecord | None, bool]:
    """(the record, whether a live writer holds the directory now), for another process.

    Must not be called by the holder itself: closing its descriptor would drop its lock."""
    path = run_dir.lease
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None, False
    try:
        record = _read(fd)
        try:
            fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            held: bool | None = False
        except OSError as err:
            held = True if err.errno in _HELD else None
        if held is None:  # no locks here: judge the record
            alive = record is not None and pid_alive(record.pid)
            verdict = judge(
                record,
                my_host=os.uname().nodename,
                my_job_id="",
                now=time.time(),
                pid_alive=alive,
                locked=None,
            )
            held = verdict is Verdict.HELD
        return record, bool(held)
    finally:
        os.close(fd)


def refuse_if_held(run_dir: RunDir, job_id: str) -> None:
    """RunDirBusy, as the lease's own refusal says it, when another live process writes
    run_dir; asked without taking the lease, so a refused command writes nothing. A
    record of this Slurm job (`job_id`: a requeue's earlier attempt) is this job's own."""
    record, held = holder(run_dir)
    if not held or (record is not None and record.job_id == job_id):
        return
    raise RunDirBusy(busy_message(str(run_dir), record, time.time()))


@contextlib.contextmanager
def held(run_dir: RunDir, env: Mapping[str, str], command: str, writes: bool) -> Iterator[bool]:
    """The run directory's lease for the life of this block, taken by the process that
    `writes` it (the others of a job step yield False and take nothing). Yields whether
    this process holds it."""
    if not writes:
        yield False
        return
    lease = acquire_for(run_dir, env, command)
    try:
        yield True
    finally:
        lease.release()
