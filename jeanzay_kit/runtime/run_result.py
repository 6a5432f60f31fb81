"""A run's result, `<run_dir>/result.json`: what a search optimizes (docs/tuning.md).

Rank 0 writes it when a run completes (not when a signal stopped it): the final training
loss, the final evaluation (eval_loss and every eval.metrics value, with the step it was
measured at), and, under `objective` and `value`, the number tune.objective names,
with the direction a search should take. The values come from metrics.jsonl, which a
resumed run keeps up to its checkpoint, so a run stopped and resumed three times ends with
the same result as one that ran straight. Hydra's sweeper receives `value` as the run's
return value (train_app.py, node/task.py).

A loop of your own writes it with the session (`s.report(value, step)`, or from the
values it logged with s.log); a script writes the file itself: {"value": 0.42} is
enough (docs/tuning.md).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from jeanzay_kit.durable_io import write_durably
from jeanzay_kit.rundir.run_directory import RunDir


def final_values(records: Iterable[Mapping[str, Any]]) -> dict[str, float | int]:
    """The last training loss (train_loss, its step) and the newest evaluation (every
    eval_* value of the last record holding one, eval_step) of metrics.jsonl records."""
    out: dict[str, float | int] = {}
    evaluation: dict[str, float | int] = {}
    for record in records:
        if isinstance(record.get("loss"), (int, float)):
            out["train_loss"], out["step"] = float(record["loss"]), int(record.get("step", 0))
        evals = {
            k: float(v)
            for k, v in record.items()
            if k.startswith("eval_") and isinstance(v, (int, float)) and not isinstance(v, bool)
        }
        if evals:
            evaluation = {**evals, "eval_step": int(record.get("step", 0))}
    return {**out, **evaluation}


def objective_points(
    records: Iterable[Mapping[str, Any]], objective: str
) -> list[tuple[int, float]]:
    """(step, value) of the objective in each metrics.jsonl record that has it, finite
    ones only: what a search sees of a run under way (train_loss: the logged loss)."""
    key = "loss" if objective == "train_loss" else objective
    points = []
    for record in records:
        value = record.get(key)
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if number and math.isfinite(value):  # type: ignore[arg-type]
            points.append((int(record.get("step", 0)), float(value)))  # type: ignore[arg-type]
    return points


def result_record(
    values: Mapping[str, float | int],
    objective: str | Sequence[str],
    direction: str | Sequence[str],
) -> dict[str, Any]:
    """result.json's content: the values, the objective's name, its value (None when the
    run has no such value, or it is not finite) and the direction. Several objectives:
    `objectives`, `values` and `directions` list each, the first also under the single
    names (what Hydra's sweeper and a single-objective reader take)."""
    names = [objective] if isinstance(objective, str) else list(objective)
    directions = [direction] if isinstance(direction, str) else list(direction)
    found = [_finite(values.get(name)) for name in names]
    record: dict[str, Any] = {
        **values,
        "objective": names[0],
        "value": found[0],
        "direction": directions[0],
    }
    if len(names) > 1:
        record.update(objectives=names, values=found, directions=directions)
    return record


def _finite(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def returned_record(value: object) -> dict[str, object]:
    """result.json's content for the value a Hydra app's task function returned
    (hydra/launcher=jeanzay, node/app_task.py): a number is the run's `value` (what a
    search optimizes), a list of numbers its `values` (the first also `value`); anything
    else is kept as `returned` (its repr when it is not plain JSON) with no value."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return {"objective": "returned", "value": _finite(value), "returned": _finite(value)}
    if (
        isinstance(value, (list, tuple))
        and value
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
    ):
        found = [_finite(v) for v in value]
        return {"objective": "returned", "value": found[0], "values": found, "returned": found}
    return {"objective": "returned", "value": None, "returned": _plain_json(value)}


def _plain_json(value: object) -> object:
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return _finite(value)
    if isinstance(value, Mapping):
        return {str(k): _plain_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain_json(v) for v in value]
    return repr(value)


def missing_reason(objective: str, values: Mapping[str, Any]) -> str:
    """Why a run has no value for its objective, with what to change."""
    known = ", ".join(k for k in values if k != "step" and k != "eval_step") or "none"
    if objective.startswith("eval_") and "eval_step" not in values:
        return (
            f"tune.objective={objective}, but the run logged no evaluation. HINT: evaluate "
            "(eval.every_steps in the toolkit's loop, which evaluates at the last step "
            "too; s.log(step, eval_loss=...) or s.report(value, step) in your own), or "
            "set tune.objective=train_loss"
        )
    return (
        f"tune.objective={objective} is not among the run's values ({known}). HINT: name one "
        "of them, or report the value yourself (s.report(value, step), docs/tuning.md)"
    )


# ---- the files ---------------------------------------------------------------------------


def write_result(run_dir: RunDir, record: Mapping[str, Any]) -> None:
    write_durably(run_dir.result, (json.dumps(record) + "\n").encode())


def clear_result(run_dir: RunDir) -> None:
    """At a run's start: a result.json left by an earlier end no longer holds."""
    run_dir.result.unlink(missing_ok=True)


def read_result(run_dir: RunDir) -> dict[str, Any] | None:
    """result.json, or None when the run wrote none (or it is not a JSON object)."""
    try:
        record = json.loads(run_dir.result.read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def result_value(run_dir: RunDir) -> float | None:
    """The run's objective value: result.json's `value` (None: no result, or none)."""
    record = read_result(run_dir)
    value = record.get("value") if record else None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def result_values(run_dir: RunDir) -> list[float | None] | None:
    """Each objective's value (result.json's `values`, or its one `value`); None: no
    result.json."""
    record = read_result(run_dir)
    if record is None:
        return None
    several = record.get("values")
    if isinstance(several, list):
        return [_finite(v) for v in several]
    return [_finite(record.get("value"))]


def direction_of(objective: str, direction: str, higher_is_better: bool | None = None) -> str:
    """The one rule for tune.direction=auto, whichever loop ran: follow the metric's own
    higher_is_better where the run knows the metric (a torchmetrics class of
    eval.metrics in the toolkit's loop), else minimize, as Optuna does (a loss, and any
    value of a script's or a session's own: tune.direction=maximize says otherwise)."""
    if direction != "auto":
        return direction
    return "maximize" if higher_is_better else "minimize"


def write_end_result(
    run_dir: RunDir,
    objectives: Sequence[str],
    directions: Sequence[str],
    reported: Mapping[str, float | int] | None = None,
) -> dict[str, Any]:
    """Rank 0, at the end of a completed run, whichever loop ran it: result.json from
    metrics.jsonl's last values, and what the loop reported itself (s.report) over them;
    a note for each objective without a value, when one was asked for. Returns the
    record."""
    values = {**final_values(run_dir.metric_records()), **(reported or {})}
    record = result_record(values, objectives, directions)
    write_result(run_dir, record)
    if not _value_asked(objectives, values):
        return record
    for objective, value in zip(objectives, record.get("values", [record["value"]]), strict=True):
        if value is None:
            print(f"note: no result value: {missing_reason(objective, record)}", flush=True)
    return record


def _value_asked(objectives: Sequence[str], values: Mapping[str, Any]) -> bool:
    """Whether the run's value was asked for: an objective set (tune.objective), an
    evaluation logged, or a value reported. A run that did none of them (a plain run
    of a loop without evaluation) is told nothing about the default objective, eval_loss:
    its note ended every such run (a user's trial)."""
    from jeanzay_kit.config.schema import TuneConfig

    reported = "objective_step" in values
    evaluated = any(k.startswith("eval_") for k in values)
    return reported or evaluated or list(objectives) != [TuneConfig().objective]
