"""jeanzay_kit/analysis/summary.py: curves, legend labels and the summary's order."""

from __future__ import annotations

import math

import pytest

from jeanzay_kit.analysis.summary import (
    format_table,
    legend_labels,
    run_series,
    summary_rows,
)


def records(*rows: tuple) -> list[dict]:
    keys = ("step", "loss", "eval_loss", "samples_per_s", "step_time_s")
    return [{k: v for k, v in zip(keys, row, strict=True) if v is not None} for row in rows]


def test_curves_skip_missing_values_and_sort_by_step() -> None:
    series = run_series(
        "r",
        (),
        records(
            (20, 0.5, 0.4, 100.0, 0.2), (10, 0.9, None, 90.0, 0.3), (30, math.nan, None, None, 0.1)
        ),
    )
    assert series.loss == [(10, 0.9), (20, 0.5)]  # NaN is not plotted
    assert series.eval_loss == [(20, 0.4)]
    assert series.throughput == [(10, 90.0), (20, 100.0)]
    assert series.step_time == [(10, 0.3), (20, 0.2), (30, 0.1)]
    assert series.throughput_unit == "samples/s"


def test_tokens_per_second_when_every_record_has_it() -> None:
    series = run_series("r", (), [{"step": 1, "tokens_per_s": 5.0, "samples_per_s": 1.0}])
    assert series.throughput == [(1, 5.0)] and series.throughput_unit == "tokens/s"


def test_steps_a_session_logged_as_floats_are_drawn_and_a_record_without_one_is_not() -> None:
    # Written so by s.log before it kept only whole numbers (runtime/session_rules.whole_step).
    rows = [{"step": 2.0, "loss": 0.5}, {"step": 1.0, "loss": 0.9}, {"loss": 0.1}]
    assert run_series("r", (), rows).loss == [(1, 0.9), (2, 0.5)]
    huge = [{"step": 10**400, "loss": 0.5}, {"step": 2.5, "loss": 0.1}, {"step": True, "loss": 1}]
    assert run_series("r", (), huge).loss == [(10**400, 0.5)]


@pytest.mark.parametrize(
    ("overrides", "labels"),
    [
        # The overrides all runs share are left out of the legend.
        (
            [("a=1", "lr=0.1"), ("a=1", "lr=0.01")],
            ["lr=0.1", "lr=0.01"],
        ),
        ([("lr=0.1", "b=2"), ("lr=0.1", "b=4")], ["b=2", "b=4"]),
        # One run keeps all of its own; a run with none is named by its directory.
        ([("lr=0.1",)], ["lr=0.1"]),
        ([()], ["run0"]),
        ([("x=1",), ("x=1",)], ["run0", "run1"]),
        # A run's own directory is no difference worth a legend (a rehearsal names it).
        ([("train.steps=3000", "job.run_dir=/tmp/r/run")], ["train.steps=3000"]),
        ([("job.run_dir=/a",), ("job.run_dir=/b",)], ["run0", "run1"]),
        # Nor what a rehearsal adds to watch the run (a user trial read log_every=1).
        (
            [("optim.lr=0.1", "preemption.max_restarts=7", "job.run_dir=/r", "train.log_every=1")],
            ["optim.lr=0.1"],
        ),
    ],
)
def test_legend_labels(overrides: list[tuple[str, ...]], labels: list[str]) -> None:
    runs = [run_series(f"run{i}", o, []) for i, o in enumerate(overrides)]
    assert legend_labels(runs) == labels


def test_summary_puts_the_best_eval_first_and_runs_without_eval_last() -> None:
    runs = [
        run_series("a", ("lr=1",), records((10, 0.9, 0.8, 10.0, 1.0))),
        run_series("b", ("lr=2",), records((10, 0.7, None, 10.0, 1.0))),
        run_series("c", ("lr=3",), records((10, 0.5, 0.6, 30.0, 3.0), (20, 0.4, 0.7, 10.0, 1.0))),
        run_series("d", ("lr=4",), []),  # not logged yet
        run_series("e", ("lr=5",), records((10, 0.2, None, 10.0, 1.0))),
    ]
    rows = summary_rows(runs)
    assert [r.label for r in rows] == ["lr=3", "lr=1", "lr=5", "lr=2", "lr=4"]
    best = rows[0]
    assert (best.best_eval, best.best_eval_step, best.final_loss, best.steps) == (0.6, 10, 0.4, 20)
    assert best.throughput == 20.0 and best.step_time_s == 2.0  # medians
    table = format_table(rows).splitlines()
    assert table[0].split()[:3] == ["RUN", "STEPS", "FINAL"]
    assert table[-1].split() == ["lr=4", "-", "-", "-", "-", "-", "-", "-"]


def test_eval_metrics_and_the_input_verdict_per_run() -> None:
    from jeanzay_kit.analysis.summary import table_cells, verdict_lines

    def windows(shares: list[float], wait_s: float) -> list[dict]:
        out = []
        for i, share in enumerate(shares):
            out.append(
                {"step": 10 * (i + 1), "loss": 1.0, "data_wait_share": share, "data_wait_s": wait_s}
            )
        out[-1] |= {"eval_loss": 0.5, "eval_accuracy": 0.75, "eval_samples": 100}
        return out

    slow = run_series("slow", ("loader.num_workers=0",), windows([0.9, 0.4, 0.5, 0.6], 0.01))
    # Over the threshold only in its first window (the workers' start), and in two others:
    # never three judged windows in a row.
    fast = run_series("fast", ("loader.num_workers=4",), windows([0.9, 0.2, 0.01, 0.3], 0.01))
    tiny = run_series("tiny", ("data.size=9",), windows([0.5, 0.5, 0.5, 0.5], 0.0001))
    assert slow.eval_metrics == {"accuracy": [(40, 0.75)]}  # eval_samples is not a metric
    rows = {row.label: row for row in summary_rows([slow, fast, tiny])}
    assert rows["loader.num_workers=0"].input_bound
    assert not rows["loader.num_workers=4"].input_bound
    assert not rows["data.size=9"].input_bound  # under 2 ms a step: not worth a verdict
    cells = table_cells(list(rows.values()))
    assert "EVAL ACCURACY" in cells[0] and cells[0][-1] == "DATA WAIT"
    assert cells[1][cells[0].index("EVAL ACCURACY")] == "0.75"
    assert cells[1][-1] == "55% INPUT-BOUND"
    verdicts = verdict_lines(list(rows.values()))
    assert verdicts[0].startswith("loader.num_workers=0: input-bound (the loop waited 55%")
    assert verdicts[1] == "loader.num_workers=4: not input-bound (waited 25%, median)"
