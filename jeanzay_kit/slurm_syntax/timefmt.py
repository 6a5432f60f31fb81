"""Slurm time strings (`--time`) to minutes and back. Pure.

Slurm accepts "minutes", "minutes:seconds", "hours:minutes:seconds", "days-hours",
"days-hours:minutes" and "days-hours:minutes:seconds" (sbatch(1), --time). A bare
integer means minutes, which is also how an unquoted number in YAML arrives.
Seconds round up to a whole minute, as Slurm does.
"""

from __future__ import annotations

import math
import re

from jeanzay_kit.errors import TimeFormatError

_DAYS = re.compile(r"^(\d+)-(\d+)(?::(\d+))?(?::(\d+))?$")
_CLOCK = re.compile(r"^(\d+)(?::(\d+))?(?::(\d+))?$")

UNLIMITED = {"unlimited", "infinite"}


def parse_time(value: object) -> int:
    """Minutes in a Slurm time value; raises TimeFormatError on anything else."""
    if isinstance(value, bool):
        raise TimeFormatError("expected HH:MM:SS, D-HH:MM:SS or minutes")
    if isinstance(value, int):
        if value <= 0:
            raise TimeFormatError("must be positive")
        return value
    if not isinstance(value, str):
        raise TimeFormatError("expected HH:MM:SS, D-HH:MM:SS or minutes")
    text = value.strip()
    days = hours = minutes = seconds = 0
    if m := _DAYS.match(text):
        days, hours = int(m.group(1)), int(m.group(2))
        minutes = int(m.group(3) or 0)
        seconds = int(m.group(4) or 0)
    elif m := _CLOCK.match(text):
        parts = [int(p) for p in m.groups() if p is not None]
        if len(parts) == 1:
            (minutes,) = parts
        elif len(parts) == 2:
            minutes, seconds = parts
        else:
            hours, minutes, seconds = parts
    else:
        raise TimeFormatError("expected HH:MM:SS, D-HH:MM:SS or minutes")
    # A bare "90" means 90 minutes, but inside a clock each field stays below 60.
    clock_has_minutes_field = bool(days or hours) or text.count(":") == 2
    if seconds >= 60 or (clock_has_minutes_field and minutes >= 60):
        raise TimeFormatError("minutes and seconds must be below 60")
    total = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    if total <= 0:
        raise TimeFormatError("must be positive")
    return math.ceil(total / 60)


def format_time(minutes: int) -> str:
    """Minutes as Slurm's HH:MM:SS (hours may exceed 24: 100:00:00)."""
    hours, mins = divmod(minutes, 60)
    return f"{hours:02d}:{mins:02d}:00"
