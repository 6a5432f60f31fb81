"""Heartbeats and the hang watchdog of one rank, both on background threads.

The training thread only sets two attributes per phase (`beat(step, phase)`): no device
sync, no collective, no I/O on the hot path. A writer thread writes
`<run_dir>/heartbeat/rank-<N>.json` every `heartbeat_seconds` (write aside, rename: a
reader never sees half a file); the format is in docs/stuck-jobs.md.

The watchdog thread reads every rank's heartbeat every few seconds (the run directory is
on a filesystem every node sees) and judges them with runtime/stall.py. It needs no
collective, so a rank blocked in one still detects a frozen peer. On a stall it dumps
this rank's Python stacks (faulthandler, every thread) into `<run_dir>/hang-<step>/`,
the lowest live rank writes `report.txt` and prints the verdict, and the process exits
with Exit.HUNG, its own child processes (loader workers) ended first: the launcher
(node/local.py, or srun's --kill-on-bad-exit) ends the rest and the restart budget
(preemption.max_restarts) decides what comes next.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, MutableMapping
from pathlib import Path

from jeanzay_kit import report
from jeanzay_kit.ending.codes import Exit
from jeanzay_kit.rundir.run_directory import RunDir, read_beats  # read_beats: node/'s readers too
from jeanzay_kit.runtime.child_processes import end_descendants
from jeanzay_kit.runtime.stall import Stall, check_seconds, find_stall

# torch's flight recorder: the last collectives of each rank, written next to the stacks as
# hang-<step>/flight_recorder/rank_<N> (read with torch.distributed.flight_recorder.fr_trace).
FLIGHT_DIR = "flight_recorder"
FLIGHT_ENTRIES = "2000"
# Where NCCL's own watchdog dumps the recorder when a collective times out (prefix + rank).


def enable_flight_recorder(run_dir: RunDir, env: MutableMapping[str, str]) -> None:
    """Switch torch's flight recorder on (every backend since torch 2.8), before the process
    group starts; settings the user exported win. env: os.environ, passed in by the worker."""
    env.setdefault("TORCH_FR_BUFFER_SIZE", FLIGHT_ENTRIES)
    env.setdefault("TORCH_NCCL_DUMP_ON_TIMEOUT", "1")
    if "TORCH_FR_DUMP_TEMP_FILE" not in env:
        folder = run_dir.nccl_timeouts
        folder.mkdir(parents=True, exist_ok=True)
        env["TORCH_FR_DUMP_TEMP_FILE"] = str(folder / "rank_")


def dump_flight_recorder(folder: Path, rank: int) -> str:
    """This rank's flight recorder buffer into folder/flight_recorder/rank_<N>; returns a
    line for the stack file (where it went, or why there is none)."""
    try:
        from torch._C._distributed_c10d import (  # type: ignore[attr-defined]
            _dump_fr_trace,  # private: may move, hence the ImportError below
        )

        data = _dump_fr_trace()
    except (ImportError, RuntimeError) as err:
        return f"no flight recorder dump: {err}"
    out = folder / FLIGHT_DIR
    out.mkdir(parents=True, exist_ok=True)
    (out / f"rank_{rank}").write_bytes(data)
    return f"flight recorder: {out / f'rank_{rank}'}"


class Heartbeat:
    def __init__(
        self,
        run_dir: RunDir,
        rank: int,
        total_steps: int,
        token: str,
        job_id: str | None,
        interval_s: float,
    ) -> None:
        self.folder = run_dir.heartbeats
        self.folder.mkdir(parents=True, exist_ok=True)
        self.path = self.folder / f"rank-{rank}.json"
        self.rank, self.total_steps, self.token, self.job_id = rank, total_steps, token, job_id
        self.interval_s = interval_s
        self.host, self.pid = socket.gethostname(), os.getpid()
        self.step, self.phase = 0, "start"
        self.start_step: int | None = None  # set by the first beat: where this process began
        self.progress_time = time.time()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="jzk-heartbeat", daemon=True)

    def beat(self, step: int, phase: str) -> None:
        """Called by the training thread: a few attribute writes and a clock read."""
        if self.start_step is None:
            self.start_step = step
        self.step, self.phase = step, phase
        self.progress_time = time.time()

    def start(self) -> Heartbeat:
        self.write()
        self._thread.start()
        return self

    def stop(self, failed: bool = False) -> None:
        """The rank is done: say so (the watchdogs of slower ranks ignore it from now).
        A failed rank keeps its last step and phase: where it was when it failed."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        if not failed:
            self.phase = "done"
        self.write()

    def write(self) -> None:
        data = {
            "rank": self.rank,
            "host": self.host,
            "pid": self.pid,
            "job_id": self.job_id,
            "step": self.step,
            "total_steps": self.total_steps,
            "phase": self.phase,
            "progress_time": self.progress_time,
            "wall_time": time.time(),
            "token": self.token,
            "interval_s": self.interval_s,
            "start_step": self.start_step,
        }
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        try:
            tmp.write_text(json.dumps(data))
            os.replace(tmp, self.path)  # advisory: no fsync, the next beat replaces it
        except OSError:
            pass  # a full or lost filesystem must not kill training; the watchdog sees it

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.write()


class Watchdog:
    def __init__(
        self,
        heartbeat: Heartbeat,
        run_dir: RunDir,
        stall_seconds: float,
        exit_process: Callable[[int], None] = os._exit,
    ) -> None:
        self.hb, self.run_dir, self.stall_seconds = heartbeat, run_dir, stall_seconds
        # Look often enough to detect within stall_seconds + a few seconds.
        self.check_s = check_seconds(stall_seconds)
        self._exit = exit_process
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="jzk-watchdog", daemon=True)

    def start(self) -> Watchdog:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.check_s):
            stall = find_stall(
                read_beats(self.hb.folder), time.time(), self.stall_seconds, self.hb.token
            )
            if stall is not None and not self._stop.is_set():
                self._on_stall(stall)
                return

    def _on_stall(self, stall: Stall) -> None:
        folder = self.run_dir.hang_dir(stall.step)
        folder.mkdir(parents=True, exist_ok=True)
        message = stall.message(self.stall_seconds)
        with open(folder / f"rank-{self.hb.rank}.txt", "w") as out:
            out.write(f"rank {self.hb.rank} pid {self.hb.pid} host {self.hb.host}\n{message}\n")
            out.write(dump_flight_recorder(folder, self.hb.rank) + "\n\n")
            out.flush()
            faulthandler.dump_traceback(file=out, all_threads=True)
        verdict = folder / "report.txt"
        if stall.reporter == self.hb.rank:
            verdict.write_text(message + "\n")
            print(
                f"{report.TRAIN}: hang: {message}. Python stacks of the live ranks: {folder}",
                file=sys.stderr,
                flush=True,
            )
        else:
            # Leave the reporter time to see the stall too: once one rank exits, the
            # launcher ends the others.
            deadline = time.monotonic() + 2 * self.check_s + 5
            while not verdict.exists() and time.monotonic() < deadline:
                time.sleep(0.2)
        # Its loader workers go with it: a stuck one would outlive it (runtime/child_processes.py).
        ended = end_descendants()
        if ended:
            with (
                contextlib.suppress(OSError),
                open(folder / f"rank-{self.hb.rank}.txt", "a") as out,
            ):
                listed = ", ".join(f"{pid} (state {state})" for pid, state in ended)
                out.write(f"\nits child processes, ended with it: {listed}\n")
        self._exit(Exit.HUNG)


def start_watch(
    run_dir: RunDir,
    rank: int,
    total_steps: int,
    job_id: str | None,
    heartbeat_seconds: float,
    stall_seconds: float,
    *,
    exit_process: Callable[[int], None] = os._exit,
) -> tuple[Heartbeat, Watchdog]:
    """This rank's heartbeat thread and, unless stall_seconds is 0, its watchdog: the
    toolkit's loop (node/worker.py) and a session (runtime/session.py) start them alike.

    Collective (after the process group exists): rank 0 draws the attempt's token, so
    heartbeats left by an earlier attempt in the same run directory are never judged."""
    import secrets

    import torch.distributed as dist

    token = [secrets.token_hex(6) if rank == 0 else None]
    dist.broadcast_object_list(token, src=0)
    heartbeat = Heartbeat(
        run_dir, rank, total_steps, str(token[0]), job_id, heartbeat_seconds
    ).start()
    watchdog = Watchdog(heartbeat, run_dir, stall_seconds, exit_process)
    if stall_seconds > 0:
        watchdog.start()
    return heartbeat, watchdog
