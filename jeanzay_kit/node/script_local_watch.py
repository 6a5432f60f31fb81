"""The local launcher's watch over a script's processes (`jzk train job.entry=...` on
this machine): the hang rule a Slurm task applies to its command (node/script_watch_rules
.py), over the lines each process printed and the files the script wrote under its run
directory; when it fires, every process's Python stacks kept in
<run_dir>/hang-<start>/rank-<N>.txt, then the run ends with Exit.HUNG (4), as a Slurm
task's does. Without it a rank stuck in a collective held the launcher for ever, here,
while the same script on Slurm was named, dumped and ended.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jeanzay_kit.config.spec import JobSpec
from jeanzay_kit.node.script_watch import dump_stacks, signal_process
from jeanzay_kit.node.script_watch_rules import (
    WARNINGS,
    ScriptHang,
    StopSeen,
    script_hang,
    session_beat,
)
from jeanzay_kit.rundir.beats import ScriptBeat
from jeanzay_kit.rundir.run_directory import RunDir
from jeanzay_kit.runtime.stall import START_GRACE_S


@dataclass
class LocalWatch:
    """What the launcher needs to judge its processes: the run directory, when the
    attempt started, and the watchdog's settings (stall_seconds 0: no watch)."""

    run_dir: RunDir
    start: float
    stall_seconds: float
    heartbeat_seconds: float
    # The script uses the session API (script/reach.py): a stop signal waits for each
    # process's first heartbeat, written once its handler is installed.
    on_session: bool = False
    seen: StopSeen = field(default_factory=StopSeen)
    last_check: float = 0.0

    @classmethod
    def of(cls, spec: JobSpec, run_dir: RunDir, start: float) -> LocalWatch:
        """The watch of the attempt started at `start`, by the spec's watchdog.*."""
        from jeanzay_kit.script.reach import TOOLKIT, entry_file, imports_any

        script = entry_file(spec.job.entry, Path.cwd())
        on_session = script is not None and imports_any(script, Path.cwd(), TOOLKIT) is True
        watchdog = spec.watchdog
        return cls(run_dir, start, watchdog.stall_seconds, watchdog.heartbeat_seconds, on_session)

    def can_pass(
        self, signum: int, procs: Sequence[subprocess.Popen], pumps: Sequence[Any]
    ) -> bool:
        """Whether a stop signal can be passed on now, to every process in the same
        moment (ranks that stop apart fail each other's collectives). A time-limit
        warning (USR1, USR2) that reached a session loop before `session()` installed
        its handler killed it unsaved, where the same loop later saves and stops: it is
        held until every live process wrote its first heartbeat; for a script that
        writes none, until one of them printed its first line (its handler, if it has
        one, is installed by then, usually); START_GRACE_S at most. A TERM or an INT
        passes at once."""
        if signum not in WARNINGS or time.time() - self.start >= START_GRACE_S:
            return True
        if self.on_session:
            beating = {b.pid for b in self.run_dir.beats() if b.wall_time >= self.start}
            return all(p.pid in beating for p in procs if p.poll() is None)
        return any(p.last_time > 0 for p in pumps)

    def hang(self, procs: Sequence[subprocess.Popen], pumps: Sequence[Any]) -> ScriptHang | None:
        """The attempt is hung (script_watch_rules.script_hang), judged every tenth of the
        timeout. pumps: two a process (stdout, stderr: runtime/rank_log.Pump), in order."""
        now = time.time()
        every = self.seen.check_every(self.stall_seconds, 0.0, self.heartbeat_seconds)
        # Judged after a SIGTERM too (not on Slurm, whose KillWait ends the processes):
        # here nothing else would end a handler stuck in a collective.
        if self.stall_seconds <= 0 or now < self.last_check + every:
            return None
        self.last_check = now
        token = f"local-{int(self.start)}"
        beats = [
            _beat(rank, p.pid, pumps[2 * rank : 2 * rank + 2], token, now, self)
            for rank, p in enumerate(procs)
            if p.poll() is None
        ]

        def judge(newest_write: float | None) -> ScriptHang | None:
            return script_hang(
                beats,
                newest_write,
                self.start,
                now,
                stall_seconds=self.stall_seconds,
                token=token,
                signalled_at=self.seen.warned_at,
                session_beat=session_beat(self.run_dir.beats(), self.start),
            )

        # Output alone first (a process that ended printed too: rank 0, often the only
        # one to print, ends first); the run directory is walked only when none printed.
        printed = max((p.last_time for p in pumps), default=0.0) or None
        if judge(printed) is None:
            return None
        written = self.run_dir.newest_script_write()
        return judge(max(t for t in (printed, written, self.start) if t is not None))


def _beat(
    rank: int, pid: int, pumps: Sequence[Any], token: str, now: float, watch: LocalWatch
) -> ScriptBeat:
    last = max(pumps, key=lambda p: p.last_time)
    return ScriptBeat(
        rank=rank,
        host=socket.gethostname(),
        pid=pid,
        token=token,
        output_time=max(last.last_time, watch.start),
        last_line=last.last_line,
        wall_time=now,  # the launcher itself is the beat: never frozen
        interval_s=watch.heartbeat_seconds,
    )


def end_hung(
    procs: Sequence[subprocess.Popen], errs: Sequence[Any], watch: LocalWatch, hang: ScriptHang
) -> None:
    """Dump every live process's Python stacks into hang-<start>/rank-<N>.txt, end them,
    and say why. All are stopped (SIGSTOP) before any is aborted: one that died first
    would wake its peers out of their collective with an error, and their stacks would
    no longer show where they hung. The abort is pending before a process runs again
    (SIGCONT), so its handler runs first. errs: each process's stderr pump."""
    folder = watch.run_dir.hang_dir(int(watch.start))
    folder.mkdir(parents=True, exist_ok=True)
    live = [(rank, p) for rank, p in enumerate(procs) if p.poll() is None]
    for _, p in live:
        signal_process(p, signal.SIGSTOP)
    for rank, p in live:
        dump_stacks(p, errs[rank], folder / f"rank-{rank}.txt", f"process {rank}")
    message = hang.message(str(watch.run_dir.root), time.time())
    (folder / "report.txt").write_text(message + "\n")
    print(
        f"jzk train: {message}. Python stacks of every process: {folder}/rank-<N>.txt. "
        "HINT: a script that is quiet for longer on purpose needs a larger "
        "watchdog.stall_seconds (0 turns the watch off)",
        file=sys.stderr,
        flush=True,
    )
