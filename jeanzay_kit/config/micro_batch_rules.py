"""train.micro_batch_size=auto: which micro-batches keep the global batch exact, and the
search for the largest that fits. Pure: the trial of one size is a callable (a real
forward/backward on the GPU in train/micro_batch.py, a fake memory limit in the tests).

The global batch never changes: every candidate divides the per-replica batch
(train.global_batch_size / data-parallel size), and gradient accumulation makes up the
rest, so the samples of each optimizer step are the same whatever size is chosen.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

# On a CPU there is no memory to measure: auto takes the schema's default micro-batch
# (or the largest candidate below it), as a configured micro_batch_size=8 would.
CPU_FALLBACK = 8


def candidates(per_replica: int, multiple_of: int = 1) -> list[int]:
    """Micro-batch sizes that divide the per-replica batch exactly (and are a multiple of
    `multiple_of`: the GPUs nn.DataParallel splits a batch over), smallest first."""
    return [m for m in range(1, per_replica + 1) if per_replica % m == 0 and m % multiple_of == 0]


def auto_options(global_batch: int, dp_size: int, mode: str, gpus_per_node: int) -> list[int]:
    """The sizes train.micro_batch_size=auto may choose on a layout: divisors of each
    replica's share, split evenly over the GPUs nn.DataParallel drives (empty when the
    share is not whole or nothing divides it)."""
    if dp_size < 1 or global_batch % dp_size:
        return []
    return candidates(global_batch // dp_size, gpus_per_node if mode == "dataparallel" else 1)


def largest_at_most(options: list[int], limit: int) -> int:
    """The largest option <= limit (the smallest option if none is)."""
    below = [m for m in options if m <= limit]
    return below[-1] if below else options[0]


@dataclass
class SearchLog:
    """What the search tried, for the line that says what it chose and why."""

    fitted: list[int] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)


def largest_fitting(
    options: list[int], fits: Callable[[int], bool], start: int = 0
) -> tuple[int, SearchLog]:
    """The largest option for which fits(m) is true: from options[start] (the smallest,
    or where the memory estimate says the largest fitting one is: `jzk validate`'s
    launch/fit_check.py), double until one fails (or the largest option fits), then
    bisect between the last fit and the first failure. A start that fails is bisected
    down to from the smallest. Memory grows with the micro-batch, so one failure rules
    out everything above it. Returns 0 when even the smallest option does not fit."""
    log = SearchLog()

    def trial(index: int) -> bool:
        ok = fits(options[index])
        (log.fitted if ok else log.failed).append(options[index])
        return ok

    start = min(max(start, 0), len(options) - 1)
    good, bad = start, len(options)  # options[good] fits; options[bad:] do not
    if not trial(start):
        if start == 0 or not trial(0):
            return 0, log
        good, bad = 0, start
    else:
        good, bad = _double(options, good, trial)
    while bad - good > 1:
        middle = (good + bad) // 2
        if trial(middle):
            good = middle
        else:
            bad = middle
    return options[good], log


def _double(options: list[int], good: int, trial: Callable[[int], bool]) -> tuple[int, int]:
    """From a fitting options[good], the next option at least twice as large until one
    fails: (the last that fits, the first that failed or len(options))."""
    while good < len(options) - 1:
        target = 2 * options[good]
        nxt = next((i for i in range(good + 1, len(options)) if options[i] >= target), None)
        nxt = len(options) - 1 if nxt is None else nxt
        if not trial(nxt):
            return good, nxt
        good = nxt
    return good, len(options)


def explain(chosen: int, per_replica: int, log: SearchLog, device: str) -> str:
    """The line a run prints: the size, the accumulation it implies, and why."""
    accumulation = per_replica // chosen
    tried = ", ".join(
        f"{m} {'fits' if m in log.fitted else 'out of memory'}"
        for m in sorted({*log.fitted, *log.failed})
    )
    above = [m for m in log.failed if m > chosen]
    why = (
        f"the largest that fits on {device} ({tried})"
        if above
        else f"every sample of a replica's batch in one micro-batch fits on {device} ({tried})"
    )
    return (
        f"train.micro_batch_size=auto: {chosen} ({accumulation} accumulation step(s) per "
        f"optimizer step for {per_replica} samples per replica): {why}"
    )
