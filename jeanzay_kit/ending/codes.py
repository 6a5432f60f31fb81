"""How every process of the toolkit ends, and what each stop signal means: the one table
(docs/preemption.md renders it). Pure, a leaf: any room may read it.

Every stop-signal tuple and exit code of the package derives from here; a test holds
that none is written elsewhere (tests/unit/test_ending_room.py).
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from enum import IntEnum


class Exit(IntEnum):
    """A process's exit code, as the batch script, the restart logic and `jzk status`
    read it."""

    OK = 0
    RAISED = 1  # an exception: the restart logic may try the attempt again
    REFUSED = 2  # a refusal (a user's mistake, a fault that cannot pass): never retried
    STOPPED = 3  # stopped after a complete checkpoint (or requeued): run again to resume
    HUNG = 4  # a rank stalled: stacks dumped in <run_dir>/hang-<step>/, then requeued
    # The login node's `jzk` over ssh when the toolkit is not set up there (laptop mode,
    # remote/ssh_rules.py): a code no training process uses.
    NOT_SET_UP = 97

    def __str__(self) -> str:  # "3" in messages, on every Python the package supports
        return str(self.value)

    @property
    def meaning(self) -> str:
        return _MEANINGS[self]


_MEANINGS = {
    Exit.OK: "the run is done",
    Exit.RAISED: "an exception: the restart logic may try the attempt again",
    Exit.REFUSED: "a refusal (a mistake to fix, a fault that cannot pass): never retried",
    Exit.STOPPED: "stopped after a complete checkpoint, or requeued: it resumes from there",
    Exit.HUNG: "a rank stalled: stacks in <run_dir>/hang-<step>/, then requeued",
    Exit.NOT_SET_UP: "laptop mode: the toolkit is not set up on the login node",
}


@dataclass(frozen=True)
class StopSignal:
    name: str  # as in preemption.signal and `scancel --signal`
    meaning: str
    then: str  # what the run does once it has saved at the next step boundary
    from_slurm: bool  # Slurm sends it (sbatch --signal, scancel, preemption), not a terminal
    warning: bool  # ahead of a limit: the job itself is not ending yet (not TERM)


# Who passes a stop signal on to the training processes: the script task's watch
# (node/script_watch.py), the torchrun agent, the local launcher (node/local.py) and the
# Hugging Face callback (integrations/hf.py, Slurm's signals only); DataLoader workers
# ignore Slurm's (train/loader.py): their training process handles them.
STOP_SIGNALS = (
    StopSignal(
        "USR1", "the time-limit warning (#SBATCH --signal)", "requeue and resume", True, True
    ),
    StopSignal("USR2", "a site's other warning signal", "requeue and resume", True, True),
    StopSignal("TERM", "Slurm ends the job (scancel, preemption)", "let Slurm end it", True, False),
    StopSignal("INT", "Ctrl-C on a local run", "stop (exit 3)", False, False),
)
STOP_NAMES = tuple(s.name for s in STOP_SIGNALS)
# What preemption.signal may name: the signals Slurm sends ahead of the end.
SLURM_NAMES = tuple(s.name for s in STOP_SIGNALS if s.from_slurm)
# The warnings ahead of a limit: a script's watch waits for the script to save on them,
# the torchrun agent passes them on to its workers (TERM it handles as the end).
WARNING_NAMES = tuple(s.name for s in STOP_SIGNALS if s.warning)


def stop_signals(names: tuple[str, ...] = STOP_NAMES) -> tuple[signal.Signals, ...]:
    return tuple(signal.Signals[f"SIG{name}"] for name in names)


def table_lines() -> list[str]:
    """The table as the docs and the batch script's comments say it."""
    rows = [
        f"SIG{s.name:<5} {s.meaning}: save at the next step, then {s.then}" for s in STOP_SIGNALS
    ]
    codes = [f"exit {int(e):<3} {e.meaning}" for e in Exit]
    return rows + codes


_SIGNAL_NUMBERS = frozenset(int(s) for s in signal.Signals)


def signal_of_exit(code: int) -> str | None:
    """The signal a process died of, read off its 128 + N exit code (as shells, srun and
    a script task report it: node/script_task.py); None for any other code."""
    number = code - 128
    return signal.Signals(number).name if code > 128 and number in _SIGNAL_NUMBERS else None
