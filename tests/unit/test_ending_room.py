"""How an attempt ends lives in one room, jeanzay_kit/ending/ (issue 69): the stop signals
and exit codes are written once (ending/codes.py) and every requeue goes through
ending/requeue.py. Read off the package's source, so a new copy fails here."""

from __future__ import annotations

import ast
import re
import signal
from pathlib import Path

from jeanzay_kit.ending.codes import SLURM_NAMES, STOP_NAMES, Exit, stop_signals, table_lines

PACKAGE = Path(__file__).resolve().parents[2] / "jeanzay_kit"
ROOM = PACKAGE / "ending"
SIGNAL_WORDS = {f"SIG{n}" for n in STOP_NAMES} | set(STOP_NAMES)


def _outside_the_room() -> list[Path]:
    return [p for p in PACKAGE.rglob("*.py") if ROOM not in p.parents]


def _signal_word(node: ast.expr) -> bool:
    if isinstance(node, ast.Attribute) and node.attr in SIGNAL_WORDS:
        return True
    return isinstance(node, ast.Constant) and node.value in SIGNAL_WORDS


def test_no_stop_signal_tuple_outside_the_room() -> None:
    found = []
    for path in _outside_the_room():
        for node in ast.walk(ast.parse(path.read_text())):
            elts = getattr(node, "elts", None)
            tuple_like = isinstance(node, ast.Tuple | ast.List | ast.Set)
            if tuple_like and elts and sum(_signal_word(e) for e in elts) >= 2:
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert not found, found


def test_no_exit_code_constant_outside_the_room() -> None:
    constant = re.compile(r"^[A-Z_]*EXIT[A-Z_]* = \d+", re.M)
    found = [
        f"{p.relative_to(PACKAGE)}: {m.group(0)}"
        for p in _outside_the_room()
        for m in constant.finditer(p.read_text())
    ]
    assert not found, found


def test_every_requeue_goes_through_the_room() -> None:
    """Slurm's requeue is asked from ending/requeue.py only (slurm/commands.py runs it)."""
    asks = re.compile(r"\b(request_requeue|commands import requeue\b|commands\.requeue\()")
    found = [
        str(p.relative_to(PACKAGE))
        for p in _outside_the_room()
        if p != PACKAGE / "slurm" / "commands.py" and asks.search(p.read_text())
    ]
    assert not found, found


def test_the_table() -> None:
    assert STOP_NAMES == ("USR1", "USR2", "TERM", "INT") and STOP_NAMES[:3] == SLURM_NAMES
    assert stop_signals(SLURM_NAMES) == (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM)
    assert [int(e) for e in Exit] == [0, 1, 2, 3, 4, 97] and f"exit {Exit.STOPPED}" == "exit 3"
    lines = table_lines()
    assert lines[0].startswith("SIGUSR1") and "requeue and resume" in lines[0]
    assert "exit 4   a rank stalled: stacks in <run_dir>/hang-<step>/, then requeued" in lines
    documented = (PACKAGE.parent / "docs" / "preemption.md").read_text()
    assert all(line in documented for line in lines), "docs/preemption.md: render the table"
