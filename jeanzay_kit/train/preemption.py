"""Stop at a step boundary when Slurm (or a user) sends a signal.

The handler only records the signal. At each step boundary the ranks agree with one
all-reduce (any rank's signal stops all), then save together and exit; see
docs/preemption.md. Saving or talking to other ranks inside a handler could deadlock:
the handler interrupts the main thread anywhere, even inside a collective.
"""

from __future__ import annotations

import signal

# INT: Ctrl-C on a local `jzk train` (the terminal signals every process of the run) is
# a stop like the others: the loop saves at the next step boundary and exits 3.
SIGNALS = {
    "USR1": signal.SIGUSR1,
    "USR2": signal.SIGUSR2,
    "TERM": signal.SIGTERM,
    "INT": signal.SIGINT,
}
EXIT_PREEMPTED = 3  # "stopped early after a complete checkpoint: run again to resume"


class StopRequest:
    def __init__(self, names: tuple[str, ...] = ("USR1", "USR2", "TERM", "INT")):
        self.signum = 0
        self._previous = {}
        for name in names:
            sig = SIGNALS[name]
            self._previous[sig] = signal.signal(sig, self._handle)

    def _handle(self, signum: int, _frame: object) -> None:
        # SIGTERM (15) outranks USR1 (10) and USR2 (12): a cancel or a preemption wins
        # over the time-limit warning. SIGINT (2) only stops: it never asks for a requeue.
        self.signum = max(self.signum, signum)

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


def agree(local: list[int], device, extra=None) -> list[int]:  # noqa: ANN001
    """Element-wise max over all ranks: one collective per step boundary. extra: flags
    already on the device (a 1-D int64 tensor, e.g. "this rank's loss is not finite"),
    appended without a device sync of their own."""
    import torch  # here, so that installing the handlers does not wait for torch
    import torch.distributed as dist

    flags = torch.tensor(local, dtype=torch.int64, device=device)
    if extra is not None:
        flags = torch.cat([flags, extra.to(device=device, dtype=torch.int64).reshape(-1)])
    dist.all_reduce(flags, op=dist.ReduceOp.MAX)
    return [int(v) for v in flags.tolist()]


def signal_name(signum: int) -> str:
    return signal.Signals(signum).name if signum else ""
