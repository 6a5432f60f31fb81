"""Where a start's time goes before its first step: one clock per process, in parts.

A requeued job pays its start-up again at every start, on every GPU: the batch script
and srun (`launch`, from Slurm's start of the job where Slurm says when:
SLURM_JOB_START_TIME), the interpreter and its imports, rank 0's check of the user's
parts, the process group's rendezvous, building the model and its optimizer, loading
the checkpoint, opening the loader, the first batch, torch.compile. Each `mark(part)`
closes the part that ran since the previous mark. Rank 0 writes the whole at the end of
its first step: one line in starts.jsonl (kept across restarts, what the ledger reads)
and the same figures in the attempt's first metrics.jsonl record; when its loop ends,
one more line with the saving time after the last metrics record (`end_step`).

One clock per process, kept in this module as torch keeps its counters: the parts are
measured in node/worker.py, train/loop.py and between them, which share no object
before the loop's attempt exists.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jeanzay_kit.rundir.run_directory import RunDir

PARTS = (
    "launch",
    "imports",
    "check",
    "rendezvous",
    "squeue",
    "model_build",
    "checkpoint_load",
    "loader",
    "first_batch",
    "compile",
    "first_step",
)


def process_start_time() -> float | None:
    """When this process started (epoch seconds), from /proc: the interpreter's own start
    and the imports before any of our code ran count. None off Linux.

    The process's age is the boot clock's now (/proc/uptime) less its start on that clock
    (/proc/<pid>/stat field 22, in clock ticks): both to 10 ms. /proc/stat's btime (the
    boot's epoch second) is whole seconds, which put the start up to a second early (0.7 s
    on the machine that found it: every start's `imports` part carried it)."""
    try:
        stat = Path(f"/proc/{os.getpid()}/stat").read_text()
        ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22: starttime
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return time.time() - max(0.0, uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


@dataclass
class StartClock:
    began: float  # epoch seconds: the job's start where known, else the process's
    parts: dict[str, float] = field(default_factory=dict)
    last: float = 0.0
    written: bool = False
    reached: int | None = None  # rank 0: the step the previous attempt reached

    def mark(self, part: str) -> None:
        """Close `part`: the time since the previous mark is added to it."""
        now = time.time()
        self.parts[part] = self.parts.get(part, 0.0) + max(0.0, now - self.last)
        self.last = now

    def imported(self, run_dir: RunDir, rank: int) -> None:
        """The worker's imports are done; rank 0 notes the step the previous attempt
        reached, before this start's beats replace its."""
        self.mark("imports")
        if rank == 0:
            self.reached = reached_before(run_dir)

    def add(self, part: str, seconds: float) -> None:
        """Move `seconds` measured inside the last part into `part` (the first batch's
        wait inside the first step)."""
        self.parts[part] = self.parts.get(part, 0.0) + seconds

    @property
    def total_s(self) -> float:
        return sum(self.parts.values())

    def record(self) -> dict[str, Any]:
        """The start-up in metrics.jsonl's flat form: startup_s and startup_<part>_s."""
        flat: dict[str, Any] = {"startup_s": round(self.total_s, 3)}
        flat.update({f"startup_{k}_s": round(v, 3) for k, v in self.parts.items()})
        return flat


_CLOCK: StartClock | None = None
_FIRST = True  # no clock began in this process yet: its start and the job's count


def _epoch(when: str | float | None) -> float | None:
    """Epoch seconds from SLURM_JOB_START_TIME (digits) or a launcher's time (a float)."""
    if isinstance(when, float):
        return when
    return float(when) if when and when.isdigit() else None


def begin(job_start: str | float | None = None) -> StartClock:
    """The process's clock, started first thing in a worker: the time before this call
    is `launch` (job start to process start) and `imports` (process start to now). A
    later start in the same process (a one-rank run restarted in place, the runs of a
    Hydra multirun on the basic launcher) counts from now."""
    global _CLOCK, _FIRST
    now = time.time()
    process = (process_start_time() if _FIRST else None) or now
    job = _epoch(job_start) if _FIRST else None
    _FIRST = False
    clock = StartClock(began=job if job is not None and job <= process else process, last=now)
    if job is not None and job <= process:
        clock.parts["launch"] = process - job
    clock.parts["imports"] = max(0.0, now - process)
    _CLOCK = clock
    return clock


def clock() -> StartClock:
    """This start's clock; a new one where none began or the last one's start is written
    (a loop called again in the same process: a benchmark's, a test's)."""
    return _CLOCK if _CLOCK is not None and not _CLOCK.written else begin()


def write_start(run_dir: RunDir, extra: dict[str, Any]) -> None:
    """Rank 0, at the end of its first step: one line in starts.jsonl."""
    c = _CLOCK
    if c is None or c.written:
        return
    c.written = True
    line = {
        "time": time.time(),
        "host": socket.gethostname(),
        "startup_s": round(c.total_s, 3),
        "parts": {k: round(v, 3) for k, v in c.parts.items()},
        **extra,
    }
    path = run_dir.starts
    with path.open("a") as out:
        out.write(json.dumps(line) + "\n")


def write_end(run_dir: RunDir, saved_at: int, ckpt_block_s: float) -> None:
    """Rank 0, when the loop has ended (done or stopped) and its last save is on disk: one
    line in starts.jsonl with the saving time no metrics record holds (the last save's,
    waited for at the end, the caches, the final weights)."""
    line = {
        "time": time.time(),
        "host": socket.gethostname(),
        "end_step": saved_at,
        "ckpt_block_s": round(ckpt_block_s, 3),
    }
    with run_dir.starts.open("a") as out:
        out.write(json.dumps(line) + "\n")


def reached_before(run_dir: RunDir) -> int | None:
    """The step the previous attempt of this run reached (its ranks' last beats, before
    this start's replace them): the steps past the resumed one are trained again."""
    beats = run_dir.beats()
    return max((b.step for b in beats), default=None)
