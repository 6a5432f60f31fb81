"""Stop at a step boundary when Slurm (or a user) sends a signal.

The handler only records the signal. At each step boundary the ranks agree with one
all-reduce (any rank's signal stops all), then save together and exit; see
docs/preemption.md. Saving or talking to other ranks inside a handler could deadlock:
the handler interrupts the main thread anywhere, even inside a collective.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

from jeanzay_kit.ending.codes import STOP_NAMES, stop_signals

# INT: Ctrl-C on a local `jzk train` (the terminal signals every process of the run) is
# a stop like the others: the loop saves at the next step boundary and exits 3 (codes.py).
SIGNALS = dict(zip(STOP_NAMES, stop_signals(), strict=True))


# How often a rank looks for the batch shell's stop note (watch_note).
NOTE_CHECK_S = 1.0
MTIME_SLACK_S = 1.0


class StopRequest:
    def __init__(self, names: tuple[str, ...] = STOP_NAMES):
        self._signum = 0
        self._created = time.time()
        self._note: Path | None = None
        self._next_check = 0.0
        self._previous = {}
        for name in names:
            sig = SIGNALS[name]
            self._previous[sig] = signal.signal(sig, self._handle)

    def _handle(self, signum: int, _frame: object) -> None:
        self.note(signum)

    def note(self, signum: int) -> None:
        """A stop signal received by a handler of another (the local launcher's, which
        passes it on to the workers)."""
        # SIGTERM (15) outranks USR1 (10) and USR2 (12): a cancel or a preemption wins
        # over the time-limit warning. SIGINT (2) only stops: it never asks for a requeue.
        self._signum = max(self._signum, signum)

    @property
    def signum(self) -> int:
        """The strongest stop signal noted so far (0: none), the batch shell's note
        included (read at most once a NOTE_CHECK_S: a stat on a shared filesystem)."""
        if self._note is not None and not self._signum and time.monotonic() >= self._next_check:
            self._next_check = time.monotonic() + NOTE_CHECK_S
            self._signum = read_stop_note(self._note, self._created)
        return self._signum

    def watch_note(self, path: Path) -> None:
        """Also stop on the batch shell's note of a signal Slurm sent it alone
        (`--signal=B:USR1@120`, `scancel --batch`; ending/signal_rules.py): the rendered
        script writes it at `path` and the ranks read it here. A second copy of a signal
        (the note and Slurm's own) stops once: stopping is a flag."""
        self._note = path

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def ignore_from_now(self) -> None:
        """The work is over: a late signal has nothing left to stop, and must not kill.

        Slurm's time-limit warning can arrive after the last step, and the local launcher
        re-sends a signal until its workers are gone. Keeping our Python handler is not
        enough: while the interpreter shuts down it puts back the default action (which
        kills, for USR1/USR2/TERM) for every signal with a Python handler. An ignored
        signal stays ignored to the very end.
        """
        for sig in self._previous:
            signal.signal(sig, signal.SIG_IGN)


def stop_note(path: Path) -> tuple[int, int] | None:
    """(signal, mtime in ns) of the batch shell's note at `path`, None when there is
    none (or it names no stop signal)."""
    try:
        mtime = path.stat().st_mtime_ns
        name = path.read_text().strip().removeprefix("SIG")
    except OSError:
        return None
    sig = SIGNALS.get(name)
    return (int(sig), mtime) if sig is not None else None


def read_stop_note(path: Path, since: float) -> int:
    """The signal named in the batch shell's note at `path` if it was written after
    `since` (a note of an earlier attempt is not this one's), else 0."""
    note = stop_note(path)
    # A file's mtime comes from the kernel's coarse clock (or a file server's): it can
    # read a little before a time.time() taken earlier. An earlier attempt's note is
    # older by a requeue at least (tens of seconds), so a second of slack tells them apart.
    return note[0] if note is not None and note[1] / 1e9 >= since - MTIME_SLACK_S else 0


class Agreement:
    """What every rank said, element-wise max, once the all-reduce in flight is done: the
    one way ranks agree on a stop (runtime/session.py: agree_before_update waits for it
    at once, should_stop reads it one step later)."""

    def __init__(self, work: Any, flags: Any) -> None:
        self._work, self._flags = work, flags

    def result(self) -> list[int]:
        self._work.wait()
        return [int(v) for v in self._flags.tolist()]


def start_agreement(local: list[int], device: Any, extra: Any = None) -> Agreement:
    """Start an element-wise max over all ranks (one all-reduce, asynchronous). extra:
    flags already on the device (a 1-D int64 tensor, e.g. "this rank's loss is not
    finite"), appended without a device sync of their own."""
    import torch  # here, so that installing the handlers does not wait for torch
    import torch.distributed as dist

    flags = torch.tensor(local, dtype=torch.int64, device=device)
    if extra is not None:
        flags = torch.cat([flags, extra.to(device=device, dtype=torch.int64).reshape(-1)])
    return Agreement(dist.all_reduce(flags, op=dist.ReduceOp.MAX, async_op=True), flags)


def signal_name(signum: int) -> str:
    return signal.Signals(signum).name if signum else ""
