"""Which signals a script task passes on to its command, so that each reaches it once.

A script task (node/script_task.py) runs the user's command as its child, in its own
process group. A stop signal can reach that child by several roads at once:

- from the step daemon (slurmstepd): `--signal=SIG@T`, `scancel --signal`, srun passing
  on a signal it got. Every process tracking plugin (linuxproc, pgid, cgroup) signals the
  whole task, the child included: nothing to pass on;
- from the batch shell, which Slurm alone signalled (`--signal=B:SIG@T`,
  `scancel --batch`): the rendered script notes it in the run directory
  (RunDir.stop_note, .jzk-signal) and every task reads it. Only the task can
  pass it on;
- from a parent that is not the step daemon (torchrun's agent) or from someone's `kill`:
  it reached this process alone.

When Slurm signals the batch shell and the step together (`scancel --full`), or torchrun's
agent passes on what the step daemon also delivered, the same signal comes twice. A
signal that did not come from the step daemon is therefore held for SETTLE_S, and dropped
if the step daemon's copy arrives (or had arrived) within WINDOW_S: the child has it.
Pure: times and senders in, signals to send out.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# A copy not from the step daemon waits this long for the daemon's own copy.
SETTLE_S = 1.0
# Copies of one signal this close together are one delivery.
WINDOW_S = 10.0
STEP_DAEMONS = frozenset({"slurmstepd"})


def from_step_daemon(sender_name: str | None) -> bool:
    """Did the signal come from Slurm's step daemon (by the sender's process name)?"""
    return sender_name is not None and sender_name.strip() in STEP_DAEMONS


@dataclass
class SignalRelay:
    """What a task has seen of each signal, and what it still owes its child."""

    reached: dict[int, float] = field(default_factory=dict)  # signum -> the child had it
    held: dict[int, float] = field(default_factory=dict)  # signum -> first held copy

    def received(self, signum: int, reached_child: bool, now: float) -> None:
        """A copy arrived. reached_child: it came from the step daemon, which signalled
        the child too."""
        if reached_child:
            self.reached[signum] = now
            self.held.pop(signum, None)
            return
        if self._reached_recently(signum, now) or signum in self.held:
            return
        self.held[signum] = now

    def due(self, now: float) -> list[int]:
        """The held signals to pass on now (held for SETTLE_S without the daemon's copy)."""
        ready = sorted(s for s, t in self.held.items() if now - t >= SETTLE_S)
        for signum in ready:
            del self.held[signum]
            self.reached[signum] = now  # passed on: a late copy within WINDOW_S is the same
        return ready

    def _reached_recently(self, signum: int, now: float) -> bool:
        last = self.reached.get(signum)
        return last is not None and now - last <= WINDOW_S
