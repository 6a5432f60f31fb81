"""Where a run stands in time: the ETA to train.steps, the time left in the Slurm
allocation, and how many requeues the rest needs. Pure: numbers in, numbers and words out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass


def is_eval_metric(key: str) -> bool:
    """A metrics.jsonl key of eval.metrics (eval_<name>), not the eval loss or its count:
    the progress line, TensorBoard, `jzk status` and `jzk report` show these alike."""
    return key.startswith("eval_") and key not in ("eval_loss", "eval_samples")


def record_step(record: Mapping[str, object]) -> int | None:
    """A metrics.jsonl record's step: an int, or a whole float (written so by a session
    before s.log took only whole numbers); None when it has none."""
    step = record.get("step")
    if isinstance(step, bool) or not isinstance(step, int | float):
        return None
    if isinstance(step, int):
        return step
    return int(step) if step.is_integer() else None


def format_duration(seconds: float) -> str:
    """1h02m, 4m05s, 12s: short enough for a progress line."""
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


@dataclass(frozen=True)
class Outlook:
    eta_s: float  # to train.steps at the current step time
    left_s: float | None  # in this allocation (None: no time limit known)
    requeues: int  # more allocations the remaining steps need (0: they fit)


def outlook(
    step: int,
    total: int,
    step_time_s: float,
    left_s: float | None,
    allocation_s: float | None,
    lead_s: float,
) -> Outlook:
    """allocation_s: a whole allocation (resources.time); lead_s: the part of it before
    its end that goes to the time-limit save (preemption.lead_seconds)."""
    eta = max(0, total - step) * step_time_s
    if left_s is None or allocation_s is None:
        return Outlook(eta, left_s, 0)
    usable_now = max(0.0, left_s - lead_s)
    if eta <= usable_now:
        return Outlook(eta, left_s, 0)
    per_job = max(1.0, allocation_s - lead_s)
    return Outlook(eta, left_s, math.ceil((eta - usable_now) / per_job))


def requeue_note(o: Outlook, remaining_steps: int, step_time_s: float) -> str:
    """The one line that says the run will not finish in this allocation."""
    return (
        f"at {step_time_s:.3g} s/step the remaining {remaining_steps} steps take "
        f"{format_duration(o.eta_s)}, and this allocation has {format_duration(o.left_s or 0)} "
        f"left: the run needs {o.requeues} more allocation(s); with preemption.requeue=true "
        "it requeues itself at each time limit and resumes from its checkpoint"
    )


# The input-bound verdict: the loop waited for its next batch for more than this share of
# the step time, over this many logged windows in a row (the first window of an attempt,
# which holds the loader workers' start, is not judged).
INPUT_BOUND_SHARE = 0.10
INPUT_BOUND_WINDOWS = 3
# A wait shorter than this per step is the loader's own bookkeeping (fetch, collate: about
# 0.5 ms for 4 small micro-batches on the 2-core VM), which no setting removes: a toy
# model's 5 ms step is not called input-bound for it.
INPUT_BOUND_MIN_WAIT_S = 0.002


def input_bound(shares: list[float], waits: list[float] | None = None) -> bool:
    """Whether the last INPUT_BOUND_WINDOWS windows all waited more than the threshold
    share of their step time (and, given `waits` in seconds per step, at least
    INPUT_BOUND_MIN_WAIT_S per step)."""
    recent = shares[-INPUT_BOUND_WINDOWS:]
    if len(recent) < INPUT_BOUND_WINDOWS or min(recent) <= INPUT_BOUND_SHARE:
        return False
    return waits is None or min(waits[-INPUT_BOUND_WINDOWS:]) >= INPUT_BOUND_MIN_WAIT_S


def input_bound_note(shares: list[float], loader: str) -> str:
    """The one line a run prints when it is input-bound; `loader` says what it loads with."""
    recent = shares[-INPUT_BOUND_WINDOWS:]
    return (
        f"note: this run is input-bound: the training loop waited for its next batch "
        f"{min(recent):.0%}-{max(recent):.0%} of the step time over the last {len(recent)} "
        f"logged windows ({loader}). HINT: raise loader.num_workers (up to the CPUs of a "
        "process), ask for more CPUs (resources.cpus_per_task), or make __getitem__ "
        "cheaper (decode once and cache, smaller files); a dataset that is cheap to read "
        "can be faster with loader.num_workers=0 (a worker's batches cross a process "
        "boundary); docs/your-model-and-data.md"
    )
