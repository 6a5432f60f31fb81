"""Values read from a user's config or from one of the run's JSON files are `object`
until checked (no `Any` in the pure core): these narrow them where a rule has already
said what a wrong one means, or where a missing or wrong one reads as "none"."""

from __future__ import annotations

from collections.abc import Mapping
from typing import overload


def as_node(value: object) -> Mapping[str, object]:
    """A config node (a mapping), or an empty one for anything else (null, absent)."""
    return value if isinstance(value, Mapping) else {}


def strings(value: object) -> tuple[str, ...]:
    """A list of strings as a tuple; () for null or anything that is not a list of
    strings (a single string included: its rule refuses it by name)."""
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return tuple(value)
    return ()


@overload
def integer(value: object, default: int) -> int: ...
@overload
def integer(value: object, default: None) -> int | None: ...
def integer(value: object, default: int | None) -> int | None:
    """A whole number (not a bool), else `default`."""
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def items(value: object) -> list[object]:
    """A list (or tuple) as a list; [] for null or anything else."""
    return list(value) if isinstance(value, (list, tuple)) else []


# A record the run itself wrote (a beat, a manifest line): a wrong type means the file is
# damaged or being replaced, and its readers skip it (they catch TypeError).
def whole(value: object) -> int:
    """A whole number (not a bool), else TypeError."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise TypeError(f"{value!r} is not a whole number")


def real(value: object) -> float:
    """A number (a whole one read as float), else TypeError."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise TypeError(f"{value!r} is not a number")


def text(value: object) -> str:
    """A string, else TypeError."""
    if isinstance(value, str):
        return value
    raise TypeError(f"{value!r} is not a string")


def flag(value: object) -> bool:
    """true or false, else TypeError."""
    if isinstance(value, bool):
        return value
    raise TypeError(f"{value!r} is not true or false")


def human_bytes(n: float) -> str:
    """A size as a user reads it in a line: `999 B`, `12.1 KB`, `2.5 TB` (powers of 1000)."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def expand_vars(text: str, env: Mapping[str, str]) -> str:
    """$VAR and ${VAR} of `text` from `env` (the environment read at the entry point);
    an unset one stays as written: a profile's $SCRATCH, cluster.storage's paths."""
    import string

    return string.Template(text).safe_substitute(env)
