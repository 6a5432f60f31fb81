"""What `jzk report` shows of a run or a sweep, from the records of metrics.jsonl. Pure.

A run is its metrics records plus the overrides that made it; a sweep is several runs,
labelled by the overrides that differ between them (the ones every run shares say nothing
in a legend). The summary table puts the best eval loss first.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from jeanzay_kit.rundir.progress import is_eval_metric, record_step


@dataclass(frozen=True)
class RunSeries:
    """One run's curves, each a list of (step, value)."""

    name: str  # the run directory
    overrides: tuple[str, ...]
    loss: list[tuple[int, float]] = field(default_factory=list)
    eval_loss: list[tuple[int, float]] = field(default_factory=list)
    throughput: list[tuple[int, float]] = field(default_factory=list)
    step_time: list[tuple[int, float]] = field(default_factory=list)
    throughput_unit: str = "samples/s"  # or tokens/s when the run counted tokens
    data_wait: list[tuple[int, float]] = field(default_factory=list)  # share of step time
    data_wait_s: list[tuple[int, float]] = field(default_factory=list)  # seconds per step
    # eval.metrics: name -> (step, value) of each evaluation
    eval_metrics: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    mfu: list[tuple[int, float]] = field(default_factory=list)  # on a GPU of the peak table


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def run_series(
    name: str, overrides: Sequence[str], records: Sequence[Mapping[str, object]]
) -> RunSeries:
    """Curves from metrics.jsonl records; a record without a number for a key is skipped
    for that curve (eval is logged every train.eval_every steps only)."""
    unit_key = (
        "tokens_per_s" if records and all("tokens_per_s" in r for r in records) else "samples_per_s"
    )
    curves: dict[str, list[tuple[int, float]]] = {
        "loss": [],
        "eval_loss": [],
        unit_key: [],
        "step_time_s": [],
        "data_wait_share": [],
        "data_wait_s": [],
        "mfu": [],
    }
    metrics: dict[str, list[tuple[int, float]]] = {}
    for record in sorted(records, key=lambda r: record_step(r) or 0):
        step = record_step(record)
        if step is None:
            continue
        for key, points in curves.items():
            value = _number(record.get(key))
            if value is not None:
                points.append((step, value))
        for key, raw in record.items():
            if is_eval_metric(key):
                number = _number(raw)
                if number is not None:
                    metrics.setdefault(key[5:], []).append((step, number))
    return RunSeries(
        name=name,
        overrides=tuple(overrides),
        loss=curves["loss"],
        eval_loss=curves["eval_loss"],
        throughput=curves[unit_key],
        step_time=curves["step_time_s"],
        throughput_unit=unit_key.removesuffix("_per_s") + "/s",
        data_wait=curves["data_wait_share"],
        data_wait_s=curves["data_wait_s"],
        eval_metrics=metrics,
        mfu=curves["mfu"],
    )


# Overrides that say where a run writes or how it is watched, not what it trains: a
# rehearsal adds them to the user's request (a user trial read its run labelled
# `train.log_every=1`), a script task names its directory.
NOT_LABELS = ("job.run_dir=", "job.log_dir=", "train.log_every=", "preemption.max_restarts=")


def legend_labels(runs: Sequence[RunSeries]) -> list[str]:
    """Each run's overrides minus those all runs share and those of NOT_LABELS (the
    directory is said where it matters); the run directory when that leaves nothing (a
    single run, or runs that differ by nothing but their directory)."""
    if len(runs) > 1:
        shared = set(runs[0].overrides).intersection(*(set(r.overrides) for r in runs[1:]))
    else:
        shared = set()
    labels = []
    for run in runs:
        own = [o for o in run.overrides if o not in shared and not o.startswith(NOT_LABELS)]
        labels.append(" ".join(own) if own else run.name)
    return labels


@dataclass(frozen=True)
class SummaryRow:
    label: str
    steps: int | None  # the last logged step
    final_loss: float | None
    best_eval: float | None
    best_eval_step: int | None
    throughput: float | None  # median over the logged steps
    throughput_unit: str
    step_time_s: float | None  # median
    data_wait: float | None = None  # median share of the step time waiting for batches
    input_bound: bool = False  # the run's verdict (progress.py: input_bound)
    eval_metrics: dict[str, float] = field(default_factory=dict)  # the last of each


def input_verdict(run: RunSeries) -> bool:
    """Input-bound when some 3 logged windows in a row waited past the threshold, as the
    run's own note judges (its first window, the workers' start, is not judged)."""
    from jeanzay_kit.rundir.progress import input_bound

    shares = [v for _, v in run.data_wait[1:]]
    waits = [v for _, v in run.data_wait_s[1:]]
    return any(
        input_bound(shares[: end + 1], waits[: end + 1] if waits else None)
        for end in range(len(shares))
    )


def summary_rows(runs: Sequence[RunSeries]) -> list[SummaryRow]:
    """One row per run, best eval loss first; runs without an eval loss come last, ordered
    by their final train loss."""
    rows = []
    for run, label in zip(runs, legend_labels(runs), strict=True):
        best = min(run.eval_loss, key=lambda p: p[1]) if run.eval_loss else None
        rows.append(
            SummaryRow(
                label=label,
                steps=run.loss[-1][0] if run.loss else None,
                final_loss=run.loss[-1][1] if run.loss else None,
                best_eval=best[1] if best else None,
                best_eval_step=best[0] if best else None,
                throughput=statistics.median(v for _, v in run.throughput)
                if run.throughput
                else None,
                throughput_unit=run.throughput_unit,
                step_time_s=statistics.median(v for _, v in run.step_time)
                if run.step_time
                else None,
                data_wait=statistics.median(v for _, v in run.data_wait) if run.data_wait else None,
                input_bound=input_verdict(run),
                eval_metrics={name: points[-1][1] for name, points in run.eval_metrics.items()},
            )
        )

    def key(row: SummaryRow) -> tuple[int, float, float]:
        inf = math.inf
        if row.best_eval is not None:
            return (0, row.best_eval, row.final_loss if row.final_loss is not None else inf)
        return (1, row.final_loss if row.final_loss is not None else inf, 0.0)

    return sorted(rows, key=key)


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def table_cells(rows: Sequence[SummaryRow]) -> list[list[str]]:
    """The header and one list of cells per row (the text table and summary.csv)."""
    unit = rows[0].throughput_unit if rows else "samples/s"
    names = list(dict.fromkeys(name for row in rows for name in row.eval_metrics))
    cells = [
        [
            "RUN",
            "STEPS",
            "FINAL LOSS",
            "BEST EVAL",
            "AT STEP",
            *(f"EVAL {name.upper()}" for name in names),
            unit.upper(),
            "S/STEP",
            "DATA WAIT",
        ]
    ]
    for row in rows:
        cells.append(
            [
                row.label,
                "-" if row.steps is None else str(row.steps),
                _fmt(row.final_loss, ".4f"),
                _fmt(row.best_eval, ".4f"),
                "-" if row.best_eval_step is None else str(row.best_eval_step),
                *(_fmt(row.eval_metrics.get(name), ".4g") for name in names),
                _fmt(row.throughput, ".0f"),
                _fmt(row.step_time_s, ".4f"),
                _fmt(row.data_wait, ".0%") + (" INPUT-BOUND" if row.input_bound else ""),
            ]
        )
    return cells


def format_table(rows: Sequence[SummaryRow]) -> str:
    cells = table_cells(rows)
    widths = [max(len(line[i]) for line in cells) for i in range(len(cells[0]))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in cells
    )


def verdict_lines(rows: Sequence[SummaryRow]) -> list[str]:
    """Per run: is it input-bound? (what its own note said while it ran)."""
    lines = []
    for row in rows:
        if row.data_wait is None:
            continue
        if row.input_bound:
            lines.append(
                f"{row.label}: input-bound (the loop waited {row.data_wait:.0%} of the step "
                "time for its batches, median). HINT: raise loader.num_workers, ask for more "
                "CPUs, or make __getitem__ cheaper; docs/your-model-and-data.md"
            )
        else:
            lines.append(f"{row.label}: not input-bound (waited {row.data_wait:.0%}, median)")
    return lines
