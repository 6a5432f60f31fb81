"""`jzk report`'s PNG files, drawn with matplotlib's object API (no pyplot, no display:
it runs the same on a login node without X as on a laptop). An edge module: writes files.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path

from jeanzay_kit.analysis.summary import RunSeries, legend_labels

LOSS_PNG = "loss.png"
THROUGHPUT_PNG = "throughput.png"
STEP_TIME_PNG = "step_time.png"
DATA_WAIT_PNG = "data_wait.png"
MFU_PNG = "mfu.png"  # only for runs that report MFU (a GPU of runtime/peaks.py's table)


# Legend labels are wrapped at this many characters: a sweep's overrides can be long.
LABEL_WIDTH = 90
# Inches of figure height per legend line (small font), added below the plot.
LINE_INCHES = 0.19


def wrap_label(label: str, width: int = LABEL_WIDTH) -> str:
    """A legend label on lines of at most `width` characters, broken between overrides."""
    return "\n".join(textwrap.wrap(label, width, break_on_hyphens=False)) or label


def _figure(legend_lines: int = 0):  # noqa: ANN202 - matplotlib's types stay inside
    from matplotlib.figure import Figure

    # The legend goes under the plot, outside it: the figure grows by its height so the
    # plot keeps its size whatever the number and length of the labels.
    figure = Figure(figsize=(8, 5 + LINE_INCHES * legend_lines), layout="constrained")
    return figure, figure.add_subplot()


def _legend_lines(labels: Sequence[str], per_run: int) -> int:
    return sum(label.count("\n") + 1 for label in labels) * per_run


def _finish(figure, axes, title: str, ylabel: str, path: Path, labelled: bool) -> Path:  # noqa: ANN001
    axes.set_title(title)
    axes.set_xlabel("step")
    axes.set_ylabel(ylabel)
    axes.grid(True, alpha=0.3)
    if labelled:
        figure.legend(fontsize="small", loc="outside lower center", ncol=1)
    figure.savefig(path, dpi=100)
    return path


def write_plots(runs: Sequence[RunSeries], out_dir: Path) -> list[Path]:
    """loss.png (train solid, eval dashed, one colour per run), throughput.png,
    step_time.png and data_wait.png. Returns the files written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    labels = [wrap_label(label) for label in legend_labels(runs)]
    written = []

    figure, axes = _figure(_legend_lines(labels, 2))  # train and eval
    for index, (run, label) in enumerate(zip(runs, labels, strict=True)):
        colour = f"C{index % 10}"
        if run.loss:
            axes.plot(*zip(*run.loss, strict=True), color=colour, label=f"{label} train")
        if run.eval_loss:
            axes.plot(
                *zip(*run.eval_loss, strict=True),
                color=colour,
                linestyle="--",
                marker="o",
                markersize=3,
                label=f"{label} eval",
            )
    if all(v > 0 for run in runs for _, v in run.loss + run.eval_loss):
        axes.set_yscale("log")
    labelled = any(run.loss or run.eval_loss for run in runs)
    written.append(_finish(figure, axes, "loss", "loss", out_dir / LOSS_PNG, labelled))

    for attr, title, path in (
        ("throughput", "throughput", out_dir / THROUGHPUT_PNG),
        ("step_time", "step time", out_dir / STEP_TIME_PNG),
        ("data_wait", "time waiting for batches", out_dir / DATA_WAIT_PNG),
    ):
        figure, axes = _figure(_legend_lines(labels, 1))
        for index, (run, label) in enumerate(zip(runs, labels, strict=True)):
            points = getattr(run, attr)
            if points:
                axes.plot(*zip(*points, strict=True), color=f"C{index % 10}", label=label)
        unit = runs[0].throughput_unit if runs else "samples/s"
        ylabel = {
            "throughput": unit,
            "step_time": "seconds per step",
            "data_wait": "share of the step time",
        }[attr]
        labelled = any(getattr(run, attr) for run in runs)
        written.append(_finish(figure, axes, title, ylabel, path, labelled))
    if any(run.mfu for run in runs):
        written.append(_mfu_plot(runs, labels, out_dir / MFU_PNG))
    return written


def _mfu_plot(runs: Sequence[RunSeries], labels: Sequence[str], path: Path) -> Path:
    """Model FLOPs utilization against the device's dense peak, in percent."""
    figure, axes = _figure(_legend_lines(labels, 1))
    for index, (run, label) in enumerate(zip(runs, labels, strict=True)):
        if run.mfu:
            steps, values = zip(*run.mfu, strict=True)
            axes.plot(steps, [100 * v for v in values], color=f"C{index % 10}", label=label)
    return _finish(figure, axes, "model FLOPs utilization", "% of the dense peak", path, True)


HOURS_PNG = "hours.png"  # where the GPU hours went (launch/ledger.py), per run and in all


def write_hours_plot(rows: Sequence[tuple[str, object]], out_dir: Path) -> Path | None:
    """hours.png: one stacked bar per run (and their sum), GPU hours by the ledger's
    parts (launch/ledger.py PARTS); None when Slurm accounted for no run."""
    from jeanzay_kit.launch.ledger import PARTS, Ledger, total

    named = [(name, one) for name, one in rows if isinstance(one, Ledger) and one.allocated_h]
    if not named:
        return None
    if len(named) > 1:
        named.append(("in all", total([one for _, one in named])))
    figure = _figure(0)[0]
    figure.set_size_inches(8, 2 + 0.5 * len(named))
    axes = figure.axes[0]
    labels = [wrap_label(name, 40) for name, _ in named]
    left = [0.0] * len(named)
    for title, key in PARTS:
        widths = [max(0.0, getattr(one, key) or 0.0) for _, one in named]
        axes.barh(labels, widths, left=left, label=title)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    axes.invert_yaxis()
    axes.set_xlabel("GPU hours (sacct)")
    axes.set_title("where the GPU hours went")
    figure.legend(fontsize="small", loc="outside lower center", ncol=len(PARTS))
    path = out_dir / HOURS_PNG
    figure.savefig(path, dpi=100)
    return path


REHEARSAL_PNG = "rehearsal.png"  # a rehearsal's run (jzk rehearse): loss, faults marked


def write_rehearsal_plot(
    run: RunSeries,
    reference: RunSeries | None,
    faults: Sequence[tuple[str, int]],
    out_dir: Path,
) -> Path:
    """rehearsal.png: the run under the schedule's train loss against step (a resume
    from an older checkpoint draws those steps again: on the same line when the resume
    was exact), the run without faults' dashed, and each fault (kind, step) a dotted
    vertical line."""
    figure, axes = _figure(2)
    if reference is not None and reference.loss:
        steps, values = zip(*reference.loss, strict=True)
        axes.plot(steps, values, "--", color="C7", linewidth=2, label="without faults")
    if run.loss:
        steps, values = zip(*run.loss, strict=True)
        axes.plot(steps, values, color="C0", linewidth=1, label="under the schedule")
    for number, (kind, step) in enumerate(faults):
        axes.axvline(step, color=f"C{1 + number % 9}", linestyle=":")
        axes.annotate(
            f"{number} {kind}",
            (step, 1.0),
            xycoords=("data", "axes fraction"),
            rotation=90,
            va="top",
            ha="right",
            fontsize="small",
        )
    path = out_dir / REHEARSAL_PNG
    return _finish(figure, axes, "rehearsal: train loss and faults", "train loss", path, True)
