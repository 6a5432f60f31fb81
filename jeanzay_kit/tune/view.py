"""A study seen by `jzk status` and `jzk report`: its trials as a table, Optuna's plots.

Read from the study's own storage (the journal in its folder) with Optuna's API, as
optuna-dashboard reads it: `optuna-dashboard <tune.dir>/study.journal` works on the same
file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jeanzay_kit.tune.files import JOURNAL_FILE, STORAGE_FILE, TASK_ATTR


def load_study_dir(path: Path) -> Any:
    """The study of `path` (the one study its storage holds for it: a study's folder is
    its own): its journal, or the database tune.storage named."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if (path / STORAGE_FILE).is_file():  # a database shared by studies: this one by name
        record = json.loads((path / STORAGE_FILE).read_text())
        return optuna.load_study(study_name=record["study_name"], storage=record["url"])
    storage = JournalStorage(JournalFileBackend(str(path / JOURNAL_FILE)))
    names = optuna.study.get_all_study_names(storage)
    return optuna.load_study(study_name=names[-1], storage=storage)


def trial_rows(study: Any) -> list[list[str]]:
    """One row per trial: number, state, value (one per objective), last step reported,
    task, its values."""
    trials = study.get_trials(deepcopy=False)
    keys = sorted({k for t in trials for k in t.params})
    rows = [["trial", "state", "value", "step", "task", *keys]]
    for t in trials:
        value = ",".join(f"{v:.6g}" for v in t.values) if t.values is not None else "-"
        step = str(max(t.intermediate_values)) if t.intermediate_values else "-"
        values = [_short(t.params.get(k, "-")) for k in keys]
        rows.append(
            [str(t.number), t.state.name, value, step, t.user_attrs.get(TASK_ATTR, "-"), *values]
        )
    return rows


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def format_rows(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    )


PLOTS = {
    "optimization_history.png": "plot_optimization_history",
    "param_importances.png": "plot_param_importances",
    "parallel_coordinate.png": "plot_parallel_coordinate",
    "intermediate_values.png": "plot_intermediate_values",
}
PARETO_PLOTS = {"pareto_front.png": "plot_pareto_front"}


def write_study_plots(study: Any, out: Path) -> tuple[list[Path], list[str]]:
    """Optuna's matplotlib plots of the study as PNGs in `out`; (written, notes on the
    plots the study cannot have yet, e.g. importances before two trials complete)."""
    import warnings

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from optuna.visualization import matplotlib as optuna_plots

    out.mkdir(parents=True, exist_ok=True)
    written, notes = [], []
    # Several objectives: the front (the others need one objective, Optuna's `target`).
    plots = PARETO_PLOTS if len(study.directions) > 1 else PLOTS
    for name, function in plots.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Optuna marks these plots experimental
            try:
                axes = getattr(optuna_plots, function)(study)
            except (ValueError, RuntimeError) as err:
                notes.append(f"{name}: {err}")
                continue
        figure = axes.figure if hasattr(axes, "figure") else axes.flat[0].figure
        figure.set_size_inches(8, 5)
        figure.tight_layout()
        figure.savefig(out / name, dpi=100)
        plt.close(figure)
        written.append(out / name)
    return written, notes
