"""torchrun as a Slurm task (parallel.launcher=torchrun): `python -m jeanzay_kit.node.
torchrun_agent TORCHRUN_ARGS...` runs torch.distributed.run with Slurm's signals handled.

torchrun handles SIGTERM/SIGINT/SIGHUP/SIGQUIT by stopping its workers, but not SIGUSR1 or
SIGUSR2: their default action killed the agent the moment Slurm sent the time-limit
warning (seen on the local cluster: "task 0: User defined signal 1"), leaving its workers
orphaned and srun's --kill-on-bad-exit racing their checkpoint. Here the agent passes
those signals on to its workers (its direct children; with proctrack/cgroup Slurm signals
them too, and a second delivery changes nothing) and stays to collect them. Workers that
all stop with Exit.STOPPED (a complete checkpoint, requeue asked) end the agent with the
same code and one line instead of torchrun's failure report; so does a SIGTERM (Slurm ending
the step on requeue or preemption).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from jeanzay_kit.ending.codes import WARNING_NAMES, Exit, stop_signals

FORWARDED = stop_signals(WARNING_NAMES)


def _children() -> list[int]:
    """This process's direct children (Linux: /proc/self/task/*/children)."""
    pids: list[int] = []
    for task in Path("/proc/self/task").glob("*/children"):
        try:
            pids += [int(p) for p in task.read_text().split()]
        except OSError:
            continue
    return pids


def _forward(signum: int, _frame: object) -> None:
    for pid in _children():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)


def main(argv: Sequence[str] | None = None) -> int:
    for sig in FORWARDED:
        signal.signal(sig, _forward)
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    try:
        run(parse_args(list(sys.argv[1:] if argv is None else argv)))
    except ChildFailedError as err:
        codes = {f.exitcode for f in err.failures.values()}
        if codes == {Exit.STOPPED}:
            print(
                f"torchrun agent: workers stopped after a checkpoint (exit {Exit.STOPPED})",
                file=sys.stderr,
                flush=True,
            )
            return Exit.STOPPED
        raise
    except SignalException as err:
        # SIGTERM from Slurm (requeue, scancel, preemption): torchrun has already passed it
        # to the workers and waited for them; one line instead of a traceback.
        print(f"torchrun agent: {err}", file=sys.stderr, flush=True)
        return 128 + int(err.sigval)
    return 0


if __name__ == "__main__":
    sys.exit(main())
