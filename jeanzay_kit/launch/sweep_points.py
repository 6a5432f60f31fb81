"""A sweep's points as override lists, the way Hydra's basic sweeper expands them.

`jzk validate -m optim.lr=1e-3,1e-4 resources.nodes=1,2` checks each point and states the
sweep's ceiling (points x GPUs x time). The expansion is Hydra's override grammar (comma
lists, range(), choice()), so a point here is a point of `python train.py -m`.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from jeanzay_kit.config.command_line import quote_argument_lists
from jeanzay_kit.errors import ConfigError


def sweep_points(overrides: Sequence[str]) -> list[list[str]]:
    """Every combination of the swept values (the cartesian product, in Hydra's order)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        parsed = OverridesParser.create().parse_overrides(quote_argument_lists(overrides))
    except HydraException as err:
        first = str(err).splitlines()[0]
        hint = "HINT: key=a,b or key=range(1,4)"
        raise ConfigError(f"cannot read the sweep: {first}. {hint}") from None
    choices: list[list[str]] = [
        [f"{o.get_key_element()}={v}" for v in o.sweep_string_iterator()]
        if o.is_sweep_override()
        else [str(o.input_line)]
        for o in parsed
    ]
    return [list(point) for point in itertools.product(*choices)]


def ceiling_gpu_hours(points: Sequence[tuple[int, int]]) -> float:
    """The most GPU hours a sweep can use: each point's GPUs x its time limit (minutes)."""
    return sum(gpus * minutes / 60 for gpus, minutes in points)
