"""A Slurm task's watch over its script (node/script_task.py runs the command, this
supervises it): stop signals passed on exactly once, output relayed and timed, a beat
written, and a hung script named, its Python stacks dumped and its task ended with
EXIT_HUNG so the restart budget decides (node/restart_job.py). Edge: signals, processes,
threads and files; the rules are node/signal_rules.py and node/script_watch_rules.py.
"""

from __future__ import annotations

import contextlib
import json
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
from typing import BinaryIO

from jeanzay_kit.node.script_files import newest_script_write
from jeanzay_kit.node.script_watch_rules import (
    ScriptBeat,
    ScriptHang,
    hang_folder_name,
    script_hang,
)
from jeanzay_kit.node.signal_rules import STOP_NOTE_FILE, SignalRelay, from_step_daemon
from jeanzay_kit.train.heartbeat import EXIT_HUNG, HEARTBEAT_DIR
from jeanzay_kit.train.preemption import NOTE_CHECK_S

STOP_SIGNALS = (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM, signal.SIGINT)
TICK_S = 0.2
# After SIGABRT (the stacks), the command has this long to write them and end.
DUMP_WAIT_S = 10.0


@dataclass(frozen=True)
class Watch:
    run_dir: Path
    rank: int
    token: str  # the attempt (the same on every task of the step)
    start: float  # the attempt's start (JZK_STEP_START)
    stall_seconds: float = 0.0  # 0: no hang watch
    heartbeat_seconds: float = 2.0
    after_signal_seconds: float = 0.0  # quiet allowed after the stop signal (0: stall_seconds)


# The stop signals that ask the script to save and end before a limit (not SIGTERM: then
# Slurm itself is ending the job, and there is nothing left to watch).
WARNINGS = (signal.SIGUSR1, signal.SIGUSR2)


class _Pump(threading.Thread):
    """Copies one output of the command to ours as it comes, noting when it last did and
    its last line; while `capture` is set, also into that file (the stacks of a hang)."""

    def __init__(self, source: BinaryIO, sink: BinaryIO, start: float) -> None:
        super().__init__(daemon=True)
        self.source, self.sink = source, sink
        self.last_time, self.last_line = start, ""
        self.capture: BinaryIO | None = None
        self._partial = b""

    def run(self) -> None:
        fd = self.source.fileno()
        while chunk := os.read(fd, 65536):
            self.sink.write(chunk)
            self.sink.flush()
            if self.capture is not None:
                self.capture.write(chunk)
                self.capture.flush()
            self.last_time = time.time()
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


def supervise(command: Sequence[str], env: Mapping[str, str], watch: Watch) -> int:
    """Run `command` to its end under the watch; its exit code (negative: killed by that
    signal), or EXIT_HUNG when the watch found the script hung and ended it."""
    env = dict(env)
    # Python's own dump of every thread's stack on SIGABRT: how a hang is shown.
    env.setdefault("PYTHONFAULTHANDLER", "1")
    # The stop signals wait in the mask until sigtimedwait takes them, with their sender;
    # the command starts with the mask it would have had.
    before = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    child = subprocess.Popen(
        list(command),
        env=env,
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
        code = _watch(child, pumps, watch)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
    for pump in pumps:
        pump.join(timeout=2.0)  # a grandchild may still hold the pipe open
    last = max(pumps, key=lambda p: p.last_time)
    _write_beat(watch, child.pid, last.last_time, last.last_line, finished=True)
    return code


def _watch(child: subprocess.Popen, pumps: list[_Pump], watch: Watch) -> int:
    relay = SignalRelay()
    note_seen: int | None = None
    next_beat = next_note = 0.0
    # Every task reads every beat: judged every tenth of stall_seconds, not every beat,
    # so that a large job does not keep the shared filesystem busy.
    check_every = max(watch.heartbeat_seconds, watch.stall_seconds / 10)
    last_check = watch.start
    signalled: float | None = None  # when a warning came; ENDING after a SIGTERM
    while child.poll() is None:
        info = signal.sigtimedwait(STOP_SIGNALS, TICK_S)
        now = time.time()
        if info is not None:
            relay.received(info.si_signo, from_step_daemon(process_name(info.si_pid)), now)
            signalled = _noted(signalled, info.si_signo, now)
        note = None
        if now >= next_note:  # a stat on the shared filesystem: once a second
            next_note = now + NOTE_CHECK_S
            note = _stop_note(watch.run_dir)
        if note is not None and note[1] != note_seen:
            note_seen = note[1]
            relay.received(note[0], False, now)
            signalled = _noted(signalled, note[0], now)
        for signum in relay.due(now):
            if child.poll() is None:
                child.send_signal(signum)
        if now >= next_beat:
            next_beat = now + watch.heartbeat_seconds
            last = max(pumps, key=lambda p: p.last_time)
            _write_beat(watch, child.pid, last.last_time, last.last_line)
        if signalled not in (None, ENDING) and watch.after_signal_seconds > 0:
            # Warned: the shorter rule, judged as often as it needs.
            check_every = max(watch.heartbeat_seconds, watch.after_signal_seconds / 10)
        if watch.stall_seconds > 0 and now >= last_check + check_every and signalled != ENDING:
            last_check = now
            hang = _hang(watch, now, signalled)
            if hang is not None:
                return _end_hung(child, pumps, watch, hang, now)
    return child.returncode


ENDING = -1.0


def _noted(signalled: float | None, signum: int, now: float) -> float | None:
    """The watch's view of the stop: the first warning's time, or ENDING once Slurm
    sends SIGTERM (a cancel, a preemption, a requeue: the job ends whatever the script
    does)."""
    if signum == signal.SIGTERM or signalled == ENDING:
        return ENDING
    if signum in WARNINGS and signalled is None:
        return now
    return signalled


def _stop_note(run_dir: Path) -> tuple[int, int] | None:
    """(signal, mtime_ns) of the batch shell's note, if it wrote one in this step."""
    path = run_dir / STOP_NOTE_FILE
    try:
        mtime = path.stat().st_mtime_ns
        name = path.read_text().strip()
    except OSError:
        return None
    signum = getattr(signal, name if name.startswith("SIG") else f"SIG{name}", None)
    return (int(signum), mtime) if signum is not None else None


def _beat_path(watch: Watch, rank: int) -> Path:
    return watch.run_dir / HEARTBEAT_DIR / f"rank-{rank}.json"


def _write_beat(
    watch: Watch, pid: int, output_time: float, last_line: str, finished: bool = False
) -> None:
    beat = ScriptBeat(
        watch.rank,
        socket.gethostname(),
        pid,
        watch.token,
        output_time,
        last_line,
        time.time(),
        watch.heartbeat_seconds,
        finished,
    )
    path = _beat_path(watch, watch.rank)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(beat.to_json()))
        os.replace(tmp, path)  # a reader never sees half a beat
    except OSError:
        pass  # a full or slow filesystem must not end the task; the watch goes on


def read_script_beats(run_dir: Path) -> list[ScriptBeat]:
    beats = []
    for path in sorted((run_dir / HEARTBEAT_DIR).glob("rank-*.json")):
        try:
            beat = ScriptBeat.from_json(json.loads(path.read_text()))
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if beat is not None:
            beats.append(beat)
    return beats


def _hang(watch: Watch, now: float, signalled: float | None) -> ScriptHang | None:
    beats = read_script_beats(watch.run_dir)
    rule = (watch.stall_seconds, watch.token, signalled, watch.after_signal_seconds)
    # Output alone first; the run directory is walked only when no task printed.
    if script_hang(beats, None, watch.start, now, *rule) is None:
        return None
    return script_hang(beats, newest_script_write(watch.run_dir), watch.start, now, *rule)


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
    folder = watch.run_dir / hang_folder_name(watch.start)
    folder.mkdir(parents=True, exist_ok=True)
    beat_s = watch.heartbeat_seconds
    _together(folder, "seen", watch, hang, 3 * beat_s + 2.0)
    _signal(child, signal.SIGSTOP)
    _together(folder, "stopped", watch, hang, 3 * beat_s + 2.0)
    stacks = folder / f"rank-{watch.rank}.txt"
    with stacks.open("wb") as out:
        out.write(f"task {watch.rank} on {socket.gethostname()}, pid {child.pid}\n".encode())
        pumps[1].capture = out
        _signal(child, signal.SIGABRT)
        _signal(child, signal.SIGCONT)
        try:
            child.wait(timeout=DUMP_WAIT_S)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        pumps[1].join(timeout=2.0)
        pumps[1].capture = None
    # The first task to exit makes srun end the others' commands: not before they dumped.
    _together(folder, "dumped", watch, hang, DUMP_WAIT_S + 2.0)
    if watch.rank == min(b.rank for b in hang.beats):
        message = hang.message(str(watch.run_dir), now)
        (folder / "report.txt").write_text(message + "\n")
        print(
            f"jzk: {message}. Python stacks of every task: {folder}/rank-<N>.txt. HINT: a "
            "script that is quiet for longer on purpose needs a larger watchdog.stall_seconds",
            file=sys.stderr,
            flush=True,
        )
    return EXIT_HUNG


def _signal(child: subprocess.Popen, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # it ended by itself meanwhile
        os.kill(child.pid, signum)
