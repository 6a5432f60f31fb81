"""Slurm hostlist expressions: `n[01-03,7],r7i[0-1]n[3-4]` <-> a list of host names.

Pure functions, no Slurm needed. The behaviour follows what Slurm 22.05's
`scontrol show hostnames` and `scontrol show hostlist` print, and the tests compare
against those commands on generated lists:

* expansion: hosts are separated by commas or whitespace outside brackets; every
  bracket group is a comma list of numbers or `lo-hi` ranges, zero-padded to the
  width of `lo`; several groups in one name expand as a product, leftmost outermost.
  Order and duplicates are kept.
* compression: order is kept (Slurm does not sort here either); a host joins the
  previous range when it has the same prefix, the next number and a compatible
  zero padding; neighbouring ranges with one prefix share one bracket.

One deliberate superset: text after a bracket group (`n[1-2].ib`) expands, where
Slurm 22.05 rejects it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from jeanzay_kit.errors import HostlistError

# A nodelist can name a whole machine; refuse expressions that would build a list
# large enough to exhaust memory because of a typo such as n[1-100000000].
MAX_HOSTS = 1_000_000

_SEPARATORS = ", \t\n"
_TRAILING_DIGITS = re.compile(r"^(.*?)(\d+)$")


def expand_hostlist(expr: str) -> list[str]:
    """Expand a Slurm hostlist expression into host names, in Slurm's order.

    >>> expand_hostlist("r7i[0-1]n[3-4]")
    ['r7i0n3', 'r7i0n4', 'r7i1n3', 'r7i1n4']
    """
    if not isinstance(expr, str):
        raise HostlistError(f"hostlist must be a string, got {type(expr).__name__}")
    hosts: list[str] = []
    for item in _split_top_level(expr):
        for host in _expand_one(item, expr):
            hosts.append(host)
            if len(hosts) > MAX_HOSTS:
                raise HostlistError(
                    f"hostlist {expr!r} expands to more than {MAX_HOSTS} hosts; "
                    "check the ranges for a typo"
                )
    return hosts


def _split_top_level(expr: str) -> list[str]:
    """Split on commas and whitespace that are not inside brackets."""
    items: list[str] = []
    depth = 0
    current: list[str] = []
    for ch in expr:
        if ch == "[":
            if depth:
                raise HostlistError(f"nested '[' in hostlist {expr!r}")
            depth = 1
        elif ch == "]":
            if not depth:
                raise HostlistError(f"']' without '[' in hostlist {expr!r}")
            depth = 0
        if ch in _SEPARATORS and not depth:
            if current:
                items.append("".join(current))
            current = []
        else:
            current.append(ch)
    if depth:
        raise HostlistError(f"unclosed '[' in hostlist {expr!r}")
    if current:
        items.append("".join(current))
    return items


def _expand_one(item: str, expr: str) -> list[str]:
    # Split `r7i[0-1]n[3-4]` into literal and bracket parts: r7i, [0-1], n, [3-4].
    parts = re.split(r"(\[[^\]]*\])", item)
    names = [""]
    for part in parts:
        if not part:
            continue
        if part.startswith("["):
            numbers = _parse_bracket(part[1:-1], expr)
            names = [name + num for name in names for num in numbers]
            if len(names) > MAX_HOSTS:
                raise HostlistError(
                    f"hostlist {expr!r} expands to more than {MAX_HOSTS} hosts; "
                    "check the ranges for a typo"
                )
        else:
            names = [name + part for name in names]
    return names


def _parse_bracket(body: str, expr: str) -> list[str]:
    if not body.strip():
        raise HostlistError(f"empty brackets '[]' in hostlist {expr!r}")
    out: list[str] = []
    for piece in body.split(","):
        piece = piece.strip()
        lo, sep, hi = piece.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise HostlistError(
                f"bad range {piece!r} in hostlist {expr!r}: expected N or LO-HI with digits"
            )
        if not sep:
            out.append(lo)
            continue
        start, stop = int(lo), int(hi)
        if stop < start:
            raise HostlistError(f"range {piece!r} in hostlist {expr!r} goes backwards")
        if stop - start >= MAX_HOSTS:
            raise HostlistError(
                f"range {piece!r} in hostlist {expr!r} has more than {MAX_HOSTS} hosts"
            )
        width = len(lo)  # Slurm pads every number of the range to the width of LO
        out.extend(f"{n:0{width}d}" for n in range(start, stop + 1))
    return out


@dataclass
class _Range:
    prefix: str
    lo: int
    hi: int
    width: int  # digits of every number; 0 = not zero-padded

    def fmt(self, n: int) -> str:
        return f"{n:0{self.width}d}" if self.width else str(n)

    def text(self) -> str:
        return (
            self.fmt(self.lo) if self.lo == self.hi else f"{self.fmt(self.lo)}-{self.fmt(self.hi)}"
        )


def _fits(rng: _Range, digits: str) -> bool:
    """Can `digits` be written with the range's padding?"""
    return rng.fmt(int(digits)) == digits


def compress_hostlist(hosts: list[str]) -> str:
    """Compress host names into a hostlist expression, as `scontrol show hostlist` does.

    >>> compress_hostlist(["n1", "n2", "n3", "gpu"])
    'n[1-3],gpu'
    """
    entries: list[_Range | str] = []
    for host in hosts:
        if not isinstance(host, str) or not host or any(c in host for c in _SEPARATORS + "[]"):
            raise HostlistError(
                f"not a host name: {host!r} (no commas, blanks or brackets allowed)"
            )
        match = _TRAILING_DIGITS.match(host)
        if not match:
            entries.append(host)
            continue
        prefix, digits = match.groups()
        last = entries[-1] if entries else None
        if (
            isinstance(last, _Range)
            and last.prefix == prefix
            and int(digits) == last.hi + 1
            and _fits(last, digits)
        ):
            last.hi += 1
            continue
        padded = len(digits) > 1 and digits.startswith("0")
        entries.append(_Range(prefix, int(digits), int(digits), len(digits) if padded else 0))

    # Neighbouring ranges with the same prefix print in one bracket group.
    out: list[str] = []
    i = 0
    while i < len(entries):
        entry = entries[i]
        if isinstance(entry, str):
            out.append(entry)
            i += 1
            continue
        group = [entry]
        while (
            i + len(group) < len(entries)
            and isinstance(entries[i + len(group)], _Range)
            and entries[i + len(group)].prefix == entry.prefix  # type: ignore[union-attr]
        ):
            group.append(entries[i + len(group)])  # type: ignore[arg-type]
        i += len(group)
        if len(group) == 1 and entry.lo == entry.hi:
            out.append(entry.prefix + entry.text())
        else:
            out.append(f"{entry.prefix}[{','.join(r.text() for r in group)}]")
    return ",".join(out)
