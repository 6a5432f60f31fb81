"""Which way is better for a run's objectives and its kept-best checkpoint, auto resolved
(tune.direction, checkpoint.keep_best_mode): a configured metric's own higher_is_better,
else minimize (runtime/run_result.py direction_of, the one rule). Importing this module
imports no torch; asking about a metric imports its class.

Checked when a request is validated (launch/request.py spec_of, node/entry.py), so a
metric that does not say which way is better is refused before the queue, not at the
start or the end of the run.
"""

from __future__ import annotations

from jeanzay_kit.config.spec import JobSpec
from jeanzay_kit.errors import JzkError


def check_directions(spec: JobSpec) -> None:
    """Resolve every direction the run will need now: a JzkError naming the key."""
    objective_directions(spec)
    if spec.checkpoint.keep_best:
        best_direction(spec)


def best_direction(spec: JobSpec) -> str:
    """checkpoint.keep_best_mode, with auto resolved: min for the loss, else the metric
    class's own `higher_is_better` (torchmetrics states it on every metric class)."""
    mode, key = spec.checkpoint.keep_best_mode, spec.checkpoint.keep_best or ""
    if mode != "auto":
        return mode
    higher = _higher_is_better(spec, key, "checkpoint.keep_best", "checkpoint.keep_best_mode=max")
    return "max" if higher else "min"


def objective_directions(spec: JobSpec) -> tuple[str, ...]:
    """tune.direction of each objective, auto resolved by the rule every loop follows
    (runtime/run_result.py direction_of), with the metric's own higher_is_better."""
    from jeanzay_kit.runtime.run_result import direction_of

    tune = spec.tune
    return tuple(
        direction_of(objective, d, None if d != "auto" else _objective_higher(spec, objective))
        for objective, d in zip(tune.objectives, tune.directions, strict=True)
    )


def _objective_higher(spec: JobSpec, objective: str) -> bool:
    return _higher_is_better(spec, objective, "tune.objective", "tune.direction=maximize")


def _higher_is_better(spec: JobSpec, key: str, field: str, fix: str) -> bool:
    """Whether a larger value of a metrics.jsonl key is better: never for a loss."""
    name = key.removeprefix("eval_")
    if name == "loss" or key == "train_loss" or name not in spec.eval.metrics:
        return False
    target = str(spec.eval.metrics[name]["_target_"])
    from hydra.utils import get_class

    higher = getattr(get_class(target), "higher_is_better", None)
    if higher is None:
        raise JzkError(
            f"{field}={key}: {target} does not say whether higher is better "
            f"(no higher_is_better). HINT: set {fix} or its opposite"
        )
    return bool(higher)
