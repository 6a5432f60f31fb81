"""tune.params, read with Hydra's own override grammar: the words of a `-m` sweep.

`optim.lr: tag(log, interval(1e-4, 1e-1))` is a float drawn on a log scale,
`model.n_layer: choice(2, 4, 6)` (or `2,4,6`) one of a list, `train.steps: range(100, 400,
step=100)` an integer from a range (its stop excluded, as in Hydra), `tag(int, interval(1,
8))` an integer interval; a plain value is fixed for every trial. The same syntax as
hydra-optuna-sweeper's `hydra.sweeper.params`, so a search moves between the two unchanged.

A key written as an option, `--lr: tag(log, interval(1e-4, 1e-1))`, is an argument of
your own script (job.entry): each trial adds `--lr=<value>` to job.args.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jeanzay_kit.errors import Problem, SpecError


@dataclass(frozen=True)
class SearchParam:
    """One dimension of the search: a config key and the values it may take."""

    key: str
    kind: str  # float | int | categorical | fixed
    low: float = 0.0
    high: float = 0.0
    step: float | None = None  # None: continuous (float); int ranges have one
    log: bool = False
    choices: tuple[Any, ...] = ()


def parse_space(params: Iterable[tuple[str, str]]) -> list[SearchParam]:
    """tune.params as search dimensions; a SpecError naming the key for what is not a
    sweep the study can draw from."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    space = []
    for key, text in params:
        try:
            # An option's name is not a config key Hydra's grammar reads: any will do.
            value = parser.parse_override(f"{'x' if is_option(key) else key}={text}").value()
        except HydraException as err:
            raise _refused(
                key,
                text,
                f"is not a sweep Hydra reads ({err})",
                'use e.g. "tag(log, interval(1e-4, 1e-1))", "choice(2, 4)" or "range(1, 9)"',
            ) from None
        space.append(_dimension(key, text, value))
    return space


def _dimension(key: str, text: str, value: Any) -> SearchParam:
    from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, RangeSweep

    tags = set(getattr(value, "tags", ()) or ())
    log = "log" in tags
    if isinstance(value, ChoiceSweep):
        return SearchParam(key, "categorical", choices=tuple(value.list))
    if isinstance(value, IntervalSweep):
        low, high = value.start or 0.0, value.end or 0.0  # Hydra's grammar gives both
        if low > high:
            swapped = text.replace(str(value.start), "\0").replace(str(value.end), str(value.start))
            hint = f'use "{swapped.replace(chr(0), str(value.end))}"' if "\0" in swapped else ""
            raise _refused(key, text, "has its low bound above its high one", hint or "swap them")
        if log and low <= 0:
            raise _refused(key, text, "is a log interval from 0 or below", "start it above 0")
        if "int" in tags:
            return SearchParam(key, "int", int(low), int(high), step=1, log=log)
        return SearchParam(key, "float", float(low), float(high), log=log)
    if isinstance(value, RangeSweep):
        start, stop, step = value.start, value.stop, value.step
        if not (isinstance(start, int) and isinstance(stop, int) and isinstance(step, int)):
            raise _refused(key, text, "is not of whole numbers", f'use "interval({start}, {stop})"')
        if stop - step < start:
            raise _refused(key, text, "is empty", "raise its stop")
        return SearchParam(key, "int", start, stop - step, step=step, log=log)
    if isinstance(value, (list, dict)):
        raise _refused(key, text, "is not a sweep", f'use "choice({text.strip("[]")})"')
    return SearchParam(key, "fixed", choices=(value,))


def _refused(key: str, text: str, reason: str, hint: str) -> SpecError:
    return SpecError(Problem(f"tune.params.{key}", text, reason, hint))


def is_option(key: str) -> bool:
    """`--lr`: an option of the user's script, not a config key."""
    return key.startswith("--")


def trial_overrides(values: Mapping[str, Any], script_args: Sequence[str] = ()) -> list[str]:
    """Hydra overrides that give a run a trial's values (`optim.lr=0.0031`); a script's
    options as one `job.args` override: `script_args` (the job's own) and then each
    `--option=<value>`."""
    words = [f"{k}={_override_value(v)}" for k, v in values.items() if not is_option(k)]
    options = [f"{k}={_option_value(v)}" for k, v in values.items() if is_option(k)]
    if options:
        items = ",".join(_override_value(a) for a in [*script_args, *options])
        words.append(f"job.args=[{items}]")
    return words


def describe_values(values: Mapping[str, Any]) -> str:
    """A trial's values as said to the user: `optim.lr=0.0031 --batch=64`."""
    return " ".join(
        f"{k}={_option_value(v) if is_option(k) else _override_value(v)}" for k, v in values.items()
    )


def _option_value(value: Any) -> str:
    """A value as a script reads it from its command line."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, float) else str(value)


def _override_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    text = str(value)
    # Quoted, so that a value with a comma, a space or a bracket stays one string.
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
