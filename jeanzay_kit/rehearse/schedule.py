"""A rehearsal's fault schedule: which fault, how long after training went on again.
Pure: the same seed gives the same schedule (faults.json replays it)."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

# The faults a local rehearsal injects, each as the toolkit meets it for real:
PREEMPT = "preempt"  # the time-limit warning (SIGUSR1): save at a step boundary, exit 3
KILL_RANK = "kill_rank"  # one training process killed (SIGKILL): a crash
HANG = "hang"  # one training process stopped (SIGSTOP): the watchdog's case
STARTUP = "startup"  # the warning while the run starts, before its first step
NAN = "nan"  # the loss not finite at one step (rank 0's, told to all by the agreement)
CKPT_WRITE = "ckpt_write"  # one training process killed while a checkpoint is written
# The checkpoints' filesystem full for a moment (a file takes its free space until a save
# has met it): only where that filesystem is small (FILL_LIMIT), never a shared one.
STORAGE_FULL = "storage_full"
# On the Slurm cluster (--slurm): every training process of one node killed at once.
NODE_LOST = "node_lost"
KINDS = (PREEMPT, KILL_RANK, HANG, STARTUP, NAN, CKPT_WRITE, STORAGE_FULL)
SLURM_KINDS = (*KINDS, NODE_LOST)
# What the toolkit answers with, so the report can say what to expect of each.
EXPECTED = {
    PREEMPT: "saved at the next step boundary, stopped (exit 3), resumed: 0 steps lost",
    KILL_RANK: "restarted from the newest checkpoint (a restart of preemption.max_restarts)",
    HANG: "named by the watchdog after watchdog.stall_seconds, restarted from a checkpoint",
    STARTUP: "kept until the first step boundary, saved, stopped (exit 3), resumed",
    NAN: "train.nonfinite=stop: stopped before the update (exit 2), run again from the "
    "newest checkpoint; skip: the step's update dropped",
    CKPT_WRITE: "the half-written checkpoint never counts: restarted from the one before",
    NODE_LOST: "the job step ends, the job requeues itself and resumes from the newest checkpoint",
    STORAGE_FULL: "the save fails and no partial checkpoint counts; checkpoint.on_write_error="
    "stop: stopped (exit 2) naming the full disk, run again from the newest checkpoint once "
    "there is space; continue: said, and the next save goes through",
}
# The steps a run goes on while a fault is sent and noticed (measured on the local Slurm
# cluster at 44 steps/s: 2 to 6, a hang's included).
NOTICED_STEPS = 6
# A rehearsal fills a filesystem only when it is this small in all (a tmpfs, a loop
# mount of its own): never a shared one, however little it has left.
FILL_LIMIT = 4 << 30


def kinds_for(kinds: Sequence[str], size_bytes: int) -> tuple[tuple[str, ...], str | None]:
    """The kinds a rehearsal can inject where its checkpoints go (a filesystem of
    `size_bytes` in all), and why one is left out (None: none is)."""
    if STORAGE_FULL not in kinds or size_bytes <= FILL_LIMIT:
        return tuple(kinds), None
    why = (
        f"{STORAGE_FULL} left out: the checkpoints' filesystem is {size_bytes / 2**30:.1f} GiB "
        f"in all, and a rehearsal fills only one of at most {FILL_LIMIT >> 30} GiB (a shared "
        "filesystem is never filled). HINT: to rehearse it, set checkpoint.dir to a small "
        "filesystem of its own (a tmpfs or a loop mount of a few hundred MB)"
    )
    return tuple(k for k in kinds if k != STORAGE_FULL), why


@dataclass(frozen=True)
class Fault:
    number: int
    kind: str
    after_s: float  # seconds of training after the previous fault's recovery (or the start)
    rank: int  # the process it hits (kill_rank, hang)


def schedule(
    faults: int, every_s: float, seed: int, ranks: int, kinds: Sequence[str] = KINDS
) -> list[Fault]:
    """`faults` faults, each kind as often as the others (in a seeded order), each after
    a seeded wait of 0.5 to 1.5 x every_s of training."""
    rng = random.Random(seed)
    order = [kinds[i % len(kinds)] for i in range(faults)]
    rng.shuffle(order)
    return [
        Fault(i, kind, round(every_s * rng.uniform(0.5, 1.5), 2), rng.randrange(max(ranks, 1)))
        for i, kind in enumerate(order)
    ]


def to_json(plan: Sequence[Fault], seed: int, every_s: float) -> dict[str, object]:
    return {"seed": seed, "every_s": every_s, "faults": [asdict(f) for f in plan]}


def from_json(data: Mapping[str, object]) -> list[Fault]:
    rows = data.get("faults")
    if not isinstance(rows, list):
        raise ValueError("faults.json: no 'faults' list")
    return [
        Fault(int(r["number"]), str(r["kind"]), float(r["after_s"]), int(r["rank"])) for r in rows
    ]


def paced(plan: Sequence[Fault], steps_per_s: float) -> list[tuple[Fault, int]]:
    """Each fault with the steps of training before it: its seconds at the reference's
    pace, so the schedule lands at the same steps on a faster or a slower machine."""
    return [(f, max(1, round(f.after_s * steps_per_s))) for f in plan]


def misfit(plan: Sequence[tuple[Fault, int]], steps: int, checkpoint_every: int) -> str | None:
    """Why the schedule does not fit in the run (None: it fits). Each fault is sent past
    the step the one before met (rehearse/runner.py), after its own steps of training;
    the run goes on a few steps while a fault is sent and noticed (NOTICED_STEPS, and a
    tenth of the fault's steps: more steps go by at a faster pace); a write
    interrupted waits for the next save (up to a checkpoint interval); and after the
    last fault an interval is left to resume past it."""
    writes = sum(f.kind == CKPT_WRITE for f, _ in plan)
    needed = sum(n + NOTICED_STEPS + n // 10 for _, n in plan) + checkpoint_every * (writes + 1)
    if needed < steps:
        return None
    return (
        f"the schedule needs about {needed} steps of training (its faults' seconds at the "
        f"run's pace, the steps each takes to be noticed, and a checkpoint interval of "
        f"{checkpoint_every} steps for each write interrupted and after the last) and the run "
        f"trains {steps} (its run without faults did). HINT: raise train.steps "
        "(or your script's own number of steps), or lower --faults or --every"
    )
