"""A Slurm task's watch over its script (node/script_task.py runs the command, this
supervises it): stop signals passed on exactly once, output relayed and timed, a beat
written, and a hung script named, its Python stacks dumped and its task ended with
Exit.HUNG so the restart budget decides (node/restart_job.py). Edge: signals, processes,
threads and files; the rules are ending/signal_rules.py and node/script_watch_rules.py.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from jeanzay_kit.ending.codes import Exit, stop_signals
from jeanzay_kit.ending.ending_rules import AtExit, died_at_exit, forgiven_at_exit, peers_undecided
from jeanzay_kit.ending.preemption import NOTE_CHECK_S, stop_note
from jeanzay_kit.ending.signal_rules import SignalRelay, from_step_daemon
from jeanzay_kit.node.script_watch_rules import ScriptHang, StopSeen, script_hang, session_beat
from jeanzay_kit.rundir.beats import ScriptBeat
from jeanzay_kit.rundir.run_directory import RunDir
from jeanzay_kit.runtime.rank_log import TAIL_BYTES
from jeanzay_kit.script.script_files import write_script_beat

STOP_SIGNALS = stop_signals()
TICK_S = 0.2
# After SIGABRT (the stacks), the command has this long to write them and end.
DUMP_WAIT_S = 10.0
# How long a task whose command died at exit waits for the others' commands to end
# (they end in the same moment; one still saving its checkpoint takes longer).
PEERS_WAIT_S = 120.0


@dataclass(frozen=True)
class Ended:
    """How the command ended: its exit code (negative: killed by that signal), whether
    it died at exit, after its program had ended (ending_rules.died_at_exit), and
    whether a stop signal had been passed on to it."""

    code: int
    at_exit: bool = False
    signalled: bool = False


@dataclass(frozen=True)
class Watch:
    run_dir: RunDir
    rank: int
    token: str  # the attempt (the same on every task of the step)
    start: float  # the attempt's start (JZK_STEP_START)
    stall_seconds: float = 0.0  # 0: no hang watch
    heartbeat_seconds: float = 2.0
    after_signal_seconds: float = 0.0  # quiet allowed after the stop signal (0: stall_seconds)


class _Pump(threading.Thread):
    """Copies one output of the command to ours as it comes, noting when it last did and
    its last line; while `capture` is set, also into that file (the stacks of a hang)."""

    def __init__(self, source: IO[bytes], sink: IO[bytes], start: float) -> None:
        super().__init__(daemon=True)
        self.source, self.sink = source, sink
        self.last_time, self.last_line = start, ""
        self.capture: IO[bytes] | None = None
        self._partial = b""
        self.tail = b""  # the end of the output (TAIL_BYTES)

    def run(self) -> None:
        fd = self.source.fileno()
        while chunk := os.read(fd, 65536):
            self.sink.write(chunk)
            self.sink.flush()
            if self.capture is not None:
                self.capture.write(chunk)
                self.capture.flush()
            self.last_time = time.time()
            self.tail = (self.tail + chunk)[-TAIL_BYTES:]
            lines = (self._partial + chunk).split(b"\n")
            self._partial = lines.pop()[-4096:]
            done = [line for line in lines if line.strip()]
            if done:
                self.last_line = done[-1][-500:].decode("utf-8", "replace").strip()


def process_name(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/comm").read_text()
    except OSError:
        return None


def supervise(
    command: Sequence[str], env: Mapping[str, str], watch: Watch, cwd: Path | None = None
) -> Ended:
    """Run `command` (in `cwd`) to its end under the watch; its exit code (negative:
    killed by that signal), or Exit.HUNG when the watch found the script hung and ended
    it; and whether it died at exit (its last beat says both to the other tasks)."""
    env = dict(env)
    # Python's own dump of every thread's stack on SIGABRT: how a hang is shown.
    env.setdefault("PYTHONFAULTHANDLER", "1")
    # The stop signals wait in the mask until sigtimedwait takes them, with their sender;
    # the command starts with the mask it would have had.
    before = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    child = subprocess.Popen(
        list(command),
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.pthread_sigmask(signal.SIG_SETMASK, before),  # noqa: PLW1509
    )
    assert child.stdout is not None and child.stderr is not None
    pumps = [
        _Pump(child.stdout, sys.stdout.buffer, watch.start),
        _Pump(child.stderr, sys.stderr.buffer, watch.start),
    ]
    for pump in pumps:
        pump.start()
    try:
        code, signalled = _watch(child, pumps, watch)
    except BaseException:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
        raise
    # The command has ended: the stop signals stay in the mask until this task ends, and
    # go with it. srun's SIGTERM to the step's other tasks once one has exited
    # (--kill-on-bad-exit) ended this one with 143 instead of its command's own code: a
    # NaN's exit 2 on every rank read as a crash, requeued and retried.
    for pump in pumps:
        pump.join(timeout=2.0)  # a grandchild may still hold the pipe open
    last = max(pumps, key=lambda p: p.last_time)
    tail = pumps[1].tail.decode("utf-8", "replace")
    ended = Ended(code, died_at_exit(code, tail), signalled)
    _write_beat(watch, child.pid, last.last_time, last.last_line, finished=True, ended=ended)
    return ended


def after_the_work(watch: Watch, world_size: int, ended: Ended) -> AtExit | None:
    """When this task's command died at exit: whether that is no failure
    (ending_rules.forgiven_at_exit). After a stop signal it is the stop's end at once;
    else it waits (PEERS_WAIT_S at most) until the other tasks' commands of the attempt
    have ended. None: a failure. A genuine crash (not at exit) never waits."""
    if not ended.at_exit or world_size < 2:
        return None
    deadline = time.monotonic() + PEERS_WAIT_S
    while True:
        peers = {
            b.rank: (b.code, b.at_exit)
            for b in watch.run_dir.script_beats()
            if b.token == watch.token and b.finished and b.rank != watch.rank
        }
        decided = ended.signalled or not peers_undecided(watch.rank, peers, world_size)
        if decided or time.monotonic() > deadline:
            return forgiven_at_exit(
                watch.rank, ended.code, ended.at_exit, peers, world_size, ended.signalled
            )
        time.sleep(TICK_S)


def _watch(child: subprocess.Popen, pumps: list[_Pump], watch: Watch) -> tuple[int, bool]:
    """The command's exit code, and whether a stop signal reached it (passed on by this
    watch, or sent by the step daemon to the whole task)."""
    relay, seen = SignalRelay(), StopSeen()
    note_seen: int | None = None
    next_beat = next_note = 0.0
    last_check = watch.start
    while child.poll() is None:
        info = signal.sigtimedwait(STOP_SIGNALS, TICK_S)
        now = time.time()
        if info is not None:
            relay.received(info.si_signo, from_step_daemon(process_name(info.si_pid)), now)
            seen.saw(info.si_signo, now)
        if now >= next_note:  # a stat on the shared filesystem: once a second
            next_note = now + NOTE_CHECK_S
            note = stop_note(watch.run_dir.stop_note)
            if note is not None and note[1] != note_seen:
                note_seen = note[1]
                relay.received(note[0], False, now)
                seen.saw(note[0], now)
        for signum in relay.due(now):
            if child.poll() is None:
                child.send_signal(signum)
        if now >= next_beat:
            next_beat = now + watch.heartbeat_seconds
            last = max(pumps, key=lambda p: p.last_time)
            _write_beat(watch, child.pid, last.last_time, last.last_line)
        every = seen.check_every(
            watch.stall_seconds, watch.after_signal_seconds, watch.heartbeat_seconds
        )
        if watch.stall_seconds > 0 and not seen.ending and now >= last_check + every:
            last_check = now
            hang = _hang(watch, now, seen.warned_at)
            if hang is not None:
                return _end_hung(child, pumps, watch, hang, now), bool(relay.reached)
    return child.returncode, bool(relay.reached)


def _write_beat(
    watch: Watch,
    pid: int,
    output_time: float,
    last_line: str,
    finished: bool = False,
    ended: Ended | None = None,
) -> None:
    beat = ScriptBeat(
        rank=watch.rank,
        host=socket.gethostname(),
        pid=pid,
        token=watch.token,
        output_time=output_time,
        last_line=last_line,
        wall_time=time.time(),
        interval_s=watch.heartbeat_seconds,
        finished=finished,
        code=None if ended is None else ended.code,
        at_exit=ended is not None and ended.at_exit,
    )
    write_script_beat(watch.run_dir, beat)


def _hang(watch: Watch, now: float, warned_at: float | None) -> ScriptHang | None:
    beats = watch.run_dir.script_beats()

    def judge(newest_write: float | None) -> ScriptHang | None:
        return script_hang(
            beats,
            newest_write,
            watch.start,
            now,
            stall_seconds=watch.stall_seconds,
            token=watch.token,
            signalled_at=warned_at,
            after_signal_s=watch.after_signal_seconds,
            session_beat=session_beat(watch.run_dir.beats(), watch.start),
        )

    # Output alone first; the run directory is walked only when no task printed.
    if judge(None) is None:
        return None
    return judge(watch.run_dir.newest_script_write())


def _together(folder: Path, what: str, watch: Watch, hang: ScriptHang, timeout: float) -> None:
    """Mark `what` done for this task, then wait (`timeout` at most: a lost node never
    answers) until every live task of the hung attempt has done it too."""
    (folder / f".{what}-{watch.rank}").touch()
    now = time.time()
    live = {b.rank for b in hang.beats if not b.frozen(now)}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = {int(p.name.rsplit("-", 1)[1]) for p in folder.glob(f".{what}-*")}
        if live <= done:
            return
        time.sleep(0.1)


def _end_hung(
    child: subprocess.Popen, pumps: list[_Pump], watch: Watch, hang: ScriptHang, now: float
) -> int:
    """Dump the command's Python stacks (SIGABRT: faulthandler writes every thread's),
    keep them in hang-<start>/rank-<N>.txt, end it, and say why (the lowest task).

    Every task's command is stopped (SIGSTOP) before any is aborted: a command that died
    first would wake its peers out of their collective with an error, and their stacks
    would no longer show where they hung. The abort is pending before the command runs
    again (SIGCONT), so its handler runs before anything else can."""
    folder = watch.run_dir.hang_dir(int(watch.start))
    folder.mkdir(parents=True, exist_ok=True)
    beat_s = watch.heartbeat_seconds
    _together(folder, "seen", watch, hang, 3 * beat_s + 2.0)
    signal_process(child, signal.SIGSTOP)
    _together(folder, "stopped", watch, hang, 3 * beat_s + 2.0)
    dump_stacks(child, pumps[1], folder / f"rank-{watch.rank}.txt", f"task {watch.rank}")
    # The first task to exit makes srun end the others' commands: not before they dumped.
    _together(folder, "dumped", watch, hang, DUMP_WAIT_S + 2.0)
    report = folder / "report.txt"
    if watch.rank == min(b.rank for b in hang.beats):
        message = hang.message(str(watch.run_dir), now)
        print(
            f"jzk: {message}. Python stacks of every task: {folder}/rank-<N>.txt. HINT: a "
            "script that is quiet for longer on purpose needs a larger watchdog.stall_seconds",
            file=sys.stderr,
            flush=True,
        )
        report.write_text(message + "\n")
    else:
        # The first task to exit makes srun end the others: not before the lowest one
        # has said why (seen on a busy machine: its line was lost, killed mid-way).
        deadline = time.monotonic() + DUMP_WAIT_S
        while not report.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
    return Exit.HUNG


def dump_stacks(child: subprocess.Popen, err: Any, stacks: Path, who: str) -> None:
    """Abort a stopped `child` (SIGABRT pending, then SIGCONT: faulthandler writes every
    thread's stack before anything else runs) and keep what its stderr pump `err` reads
    meanwhile in `stacks`; it ends, killed after DUMP_WAIT_S. Both watches use it: a
    Slurm task's (one command) and the local launcher's (node/script_local_watch.py)."""
    with stacks.open("wb") as out:
        out.write(f"{who} on {socket.gethostname()}, pid {child.pid}\n".encode())
        err.capture = out
        signal_process(child, signal.SIGABRT)
        signal_process(child, signal.SIGCONT)
        try:
            child.wait(timeout=DUMP_WAIT_S)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        err.join(timeout=2.0)  # the dump's last lines (a grandchild may hold the pipe)
        err.capture = None


def signal_process(child: subprocess.Popen, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # it ended by itself meanwhile
        os.kill(child.pid, signum)
