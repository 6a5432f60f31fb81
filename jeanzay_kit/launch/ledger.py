"""Where a run's GPU hours went: the ledger `jzk status` and `jzk report` show. Pure.

From Slurm's accounting (sacct: the GPU hours allocated over every start, the queue wait)
and the run's own record (starts.jsonl: each start's start-up and where it resumed, the
step the attempt before it reached; metrics.jsonl: the step time, the time saves blocked
training; the newest complete checkpoint):

- productive: the steps kept (the newest complete checkpoint) x the step time;
- retrained: steps trained again after a restart (an attempt reached step 130, its
  successor resumed from the checkpoint of step 100: 30 steps), x the step time;
- after the last save: steps an ended run trained past its newest checkpoint;
- start-up: every start's time from its process's start (the job's, where Slurm says)
  to the end of its first step, compile included;
- checkpoint: the time saves held training up (metrics.jsonl's records), and each
  attempt's end: its last save finished, the compile caches and the final weights
  written (starts.jsonl's end lines);
- idle: the rest of the allocation (batch script before the processes, the time between
  the last step and the job's end, a hang until the watchdog, waiting on a dead peer).

Each part is seconds x the allocation's GPUs; idle is what is left, so the ledger sums to
sacct's GPU hours exactly. goodput = productive / allocated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from statistics import median

from jeanzay_kit.values import real, whole


@dataclass(frozen=True)
class Start:
    start_step: int  # the step this start resumed from
    reached_before: int | None  # the step the attempt before it reached
    startup_s: float  # process start (job start where known) to the end of the first step

    @property
    def retrained(self) -> int:
        """Steps this start trains again: those the attempt before it trained past the
        checkpoint it resumes from."""
        if self.reached_before is None:
            return 0
        return max(0, self.reached_before - self.start_step)


@dataclass(frozen=True)
class RunRecord:
    """What a run directory says, for its ledger."""

    kept_step: int  # the newest complete checkpoint (0: none)
    reached: int | None  # the step the newest attempt reached (its beats)
    starts: tuple[Start, ...] = ()
    step_s: float | None = None  # median step time of the kept records
    checkpoint_s: float = 0.0  # seconds the kept steps' saves held training up


def run_record(
    starts: Sequence[Mapping[str, object]],
    metrics: Sequence[Mapping[str, object]],
    kept_step: int | None,
    reached: int | None,
) -> RunRecord:
    """The ledger's view of a run's files: starts.jsonl's and metrics.jsonl's records
    (a damaged line is left out), the newest complete checkpoint, the newest beat."""
    parsed = []
    ends_blocked = 0.0  # the end lines: saving time after the last metrics record
    for line in starts:
        if "end_step" in line:
            ends_blocked += sum(_numbers([line], "ckpt_block_s"))
            continue
        try:
            before = line.get("reached_before")
            parsed.append(
                Start(
                    whole(line["start_step"]),
                    None if before is None else whole(before),
                    real(line["startup_s"]),
                )
            )
        except (KeyError, TypeError, ValueError):
            continue
    # A window holding a compile (compile_s) says nothing of a step's time.
    times = _numbers([r for r in metrics if "compile_s" not in r], "step_time_s")
    blocked = sum(_numbers(metrics, "ckpt_block_s")) + ends_blocked
    return RunRecord(
        kept_step or 0, reached, tuple(parsed), median(times) if times else None, blocked
    )


def _numbers(records: Sequence[Mapping[str, object]], key: str) -> list[float]:
    return [
        float(v)
        for r in records
        if isinstance(v := r.get(key), (int, float)) and not isinstance(v, bool)
    ]


@dataclass(frozen=True)
class Ledger:
    """A run's (or a sweep's) GPU hours by where they went; hours are None without
    Slurm's accounting (a run on this machine), the step counts are always there."""

    allocated_h: float | None
    productive_h: float | None
    retrained_h: float | None
    after_save_h: float | None
    startup_h: float | None
    checkpoint_h: float | None
    idle_h: float | None
    kept_steps: int
    lost_steps: int  # trained for nothing: trained again, or past the last save of an end
    startup_s: float  # every start's start-up, summed
    queue_wait_s: float | None
    starts: int

    @property
    def goodput(self) -> float | None:
        if not self.allocated_h or self.productive_h is None:
            return None
        return self.productive_h / self.allocated_h


def ledger(
    record: RunRecord,
    allocated_h: float | None,
    gpus: int,
    queue_wait_s: float | None = None,
    ended: bool = True,
) -> Ledger:
    """The run's ledger. allocated_h: sacct's GPU hours over every start (None: no
    accounting); gpus: the GPUs of one start; ended: the run is not running now (its steps
    past the newest checkpoint are lost, not in flight)."""
    retrained = sum(s.retrained for s in record.starts)
    reached = record.reached if record.reached is not None else record.kept_step
    after_save = max(0, reached - record.kept_step) if ended else 0
    startup_s = sum(s.startup_s for s in record.starts)
    step_s = record.step_s or 0.0
    parts_s = {
        "productive_h": record.kept_step * step_s,
        "retrained_h": retrained * step_s,
        "after_save_h": after_save * step_s,
        "startup_h": startup_s,
        "checkpoint_h": record.checkpoint_s,
    }
    hours: dict[str, float | None] = {k: None for k in parts_s}
    idle = None
    if allocated_h is not None or gpus:  # gpus without hours: a trial of a study
        hours = {k: v * gpus / 3600 for k, v in parts_s.items()}
    if allocated_h is not None:
        idle = allocated_h - sum(h or 0.0 for h in hours.values())
    return Ledger(
        allocated_h=allocated_h,
        idle_h=idle,
        kept_steps=record.kept_step,
        lost_steps=retrained + after_save,
        startup_s=startup_s,
        queue_wait_s=queue_wait_s,
        starts=len(record.starts),
        **hours,
    )


def total(ledgers: Sequence[Ledger]) -> Ledger:
    """A sweep's (or a study's) ledger: the sum of its runs'. Hours sum over the runs
    Slurm accounted for; the queue wait is summed too (each point waited on its own)."""

    def add(values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return sum(known) if known else None

    summed: dict[str, object] = {}
    for f in fields(Ledger):
        values = [getattr(one, f.name) for one in ledgers]
        summed[f.name] = add(values) if f.type in ("float | None",) else sum(values)
    return Ledger(**summed)  # type: ignore[arg-type]


def study_total(
    trials: Sequence[Ledger], allocated_h: float | None, queue_wait_s: float | None
) -> Ledger:
    """A study's ledger (`jzk tune`): its job array's GPU hours (sacct: every task, every
    start) against the sum of its trials' parts, each from the trial's own run directory.
    The array's tasks run trials one after another, so the time no trial's part holds
    (a task's start before its first trial, Optuna between trials, a task with no trial
    left) is the study's idle."""
    summed = total(trials)
    idle = None
    if allocated_h is not None:
        idle = allocated_h - sum(getattr(summed, key) or 0.0 for _, key in PARTS[:-1])
    return replace(summed, allocated_h=allocated_h, idle_h=idle, queue_wait_s=queue_wait_s)


PARTS = (
    ("productive", "productive_h"),
    ("retrained", "retrained_h"),
    ("after save", "after_save_h"),
    ("start-up", "startup_h"),
    ("checkpoint", "checkpoint_h"),
    ("idle", "idle_h"),
)


def _hours(value: float | None) -> str:
    """Two decimals from one GPU hour up, three significant digits below: a short run's
    parts (0.0194 h) are not all 0.00 beside its lost steps."""
    if value is None:
        return "-"
    return f"{value:.2f}" if abs(value) >= 1 else f"{value:.3g}"


def ledger_table(rows: Sequence[tuple[str, Ledger]], in_all: Ledger | None = None) -> str:
    """`jzk report`'s table: one row per run and, for several, their sum (in_all: the
    sum when it is not the runs' total, a study's); GPU hours, each part's share of the
    allocation as a bar of where the hours went."""
    named = list(rows)
    if in_all is not None:
        named.append(("in all", in_all))
    elif len(named) > 1:
        named.append(("in all", total([one for _, one in named])))
    head = ["RUN", "GPU h", *(name for name, _ in PARTS), "GOODPUT", "LOST STEPS",
            "START-UP", "QUEUE", "WHERE THE HOURS WENT"]  # fmt: skip
    lines = [head]
    for name, one in named:
        lines.append(
            [
                name,
                _hours(one.allocated_h),
                *(_hours(getattr(one, key)) for _, key in PARTS),
                "-" if one.goodput is None else f"{one.goodput:.0%}",
                str(one.lost_steps),
                f"{one.startup_s:.0f} s",
                "-" if one.queue_wait_s is None else f"{one.queue_wait_s:.0f} s",
                bar(one),
            ]
        )
    widths = [max(len(row[i]) for row in lines) for i in range(len(head))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in lines
    )


BAR_MARKS = {"productive_h": "#", "retrained_h": "r", "after_save_h": "a",
             "startup_h": "s", "checkpoint_h": "c", "idle_h": "."}  # fmt: skip
BAR_WIDTH = 30


def bar(one: Ledger) -> str:
    """30 characters, each part's share of the allocated hours: # productive, r trained
    again, a after the last save, s start-up, c checkpoint, . idle."""
    if not one.allocated_h:
        return ""
    out = ""
    for key, mark in BAR_MARKS.items():
        share = max(0.0, getattr(one, key) or 0.0) / one.allocated_h
        out += mark * round(share * BAR_WIDTH)
    return out[:BAR_WIDTH]
