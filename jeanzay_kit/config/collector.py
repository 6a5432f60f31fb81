"""Gathers every problem of a request, so one run of `jzk validate` shows them all. Pure.

Each validator of config/*_rules.py takes a Collector, reads plain values, adds a Problem
(`key=value reason. HINT: fix`) for each thing wrong and returns the checked value, or
None when it is unusable; `raise_if_any` ends a stage whose results the next stage needs.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import TypeVar

from jeanzay_kit.errors import Problem, SpecError

T = TypeVar("T")

# Control characters would end an #SBATCH line and start a shell command.
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# A variable the node's shell expands in a rendered value: $NAME or ${NAME}.
VARIABLE = re.compile(r"\$(?:[A-Za-z_][A-Za-z0-9_]*|\{[A-Za-z_][A-Za-z0-9_]*\})")


def only_variables(text: str) -> bool:
    """True when every `$` of `text` starts a `$NAME`/`${NAME}` and nothing else in it is
    special inside bash's double quotes (a backtick, a backslash, a quote, `!`): the
    value can be rendered as "text", expanded on the node and nothing else
    (config/container_rules.py checks it, slurm/shell_words.py writes it)."""
    rest = VARIABLE.sub("", text)
    return not re.search(r'[$`"\\!]', rest) and not CONTROL.search(text)


class Collector:
    def __init__(self) -> None:
        self.problems: list[Problem] = []

    def add(self, key: str, value: object, reason: str, hint: str = "") -> None:
        self.problems.append(Problem(key, value, reason, hint))

    def node(self, key: str, value: object) -> Mapping[str, object]:
        """A config section that may be null (a config frozen before it existed): its
        keys, {} for null; anything else is refused by name, and read as {}."""
        if value is None or isinstance(value, Mapping):
            return value or {}
        self.add(key, value, "must be a group of keys", f"leave {key} out, or set {key}.KEY=VALUE")
        return {}

    def positive_int(self, key: str, value: object, minimum: int = 1) -> int | None:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, str) and value.strip().lstrip("+").isdigit():
                value = int(value)
            else:
                self.add(key, value, "is not a whole number", f"use e.g. {key}={minimum}")
                return None
        if value < minimum:
            self.add(key, value, f"must be at least {minimum}", f"use {key}={minimum} or more")
            return None
        return value

    def number(
        self,
        key: str,
        value: object,
        low: float,
        high: float = math.inf,
        *,
        low_open: bool = False,
        high_open: bool = False,
        example: object = None,
    ) -> float | None:
        """A real number in [low, high] (an end excluded when *_open)."""
        try:
            if isinstance(value, bool):
                raise ValueError
            number = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            self.add(key, value, "is not a number", f"use e.g. {key}={example or low}")
            return None
        too_low = number < low or (low_open and number == low)
        too_high = number > high or (high_open and number == high)
        if math.isnan(number) or too_low or too_high:
            left, right = "(" if low_open else "[", ")" if high_open else "]"
            upper = "inf" if high == math.inf else f"{high:g}"
            self.add(
                key,
                value,
                f"must be in {left}{low:g}, {upper}{right}",
                f"use e.g. {key}={example if example is not None else low}",
            )
            return None
        return number

    def flag(self, key: str, value: object) -> bool | None:
        if not isinstance(value, bool):
            self.add(key, value, "is not true or false", f"use {key}=true or {key}=false")
            return None
        return value

    def auto_flag(self, key: str, value: object) -> bool | None:
        """true/false, or None for auto (the run decides from its device)."""
        if isinstance(value, bool):
            return value
        if value != "auto":
            self.add(key, value, "is not true, false or auto", f"use {key}=auto, true or false")
        return None

    def choice(
        self, key: str, value: object, choices: tuple[str, ...], hint: str = ""
    ) -> str | None:
        if value not in choices:
            self.add(
                key, value, f"is not one of {', '.join(choices)}", hint or f"use {key}={choices[0]}"
            )
            return None
        return str(value)

    def line(self, key: str, value: object, hint: str = "") -> str | None:
        """A non-empty single-line string (it is written into a script or a path)."""
        if not isinstance(value, str) or not value.strip() or CONTROL.search(value):
            self.add(key, value, "must be a non-empty single-line string", hint)
            return None
        return value

    def raise_if_any(self) -> None:
        if self.problems:
            raise SpecError(self.problems)


def section(cfg: Mapping[str, object], name: str) -> Mapping[str, object]:
    """A top-level section of the config; its absence is an error naming it."""
    node = cfg.get(name)
    if not isinstance(node, Mapping):
        raise SpecError(
            Problem(
                name,
                node,
                "is missing from the config",
                f"the root config must have a `{name}` section",
            )
        )
    return node


def complete(settings: type[T], nullable: tuple[str, ...] = (), **checked: object) -> T | None:
    """settings(**checked), by keyword, when every checked value is usable (None: one was
    not, and its problem is in the Collector). nullable: keys whose None is a value."""
    if any(value is None for key, value in checked.items() if key not in nullable):
        return None
    return settings(**checked)
