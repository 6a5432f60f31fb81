"""One place makes a process group (issue 44): distributed/process_group.py join_group."""

from __future__ import annotations

import ast
from pathlib import Path

import jeanzay_kit

PACKAGE = Path(jeanzay_kit.__file__).parent


def test_init_process_group_is_called_in_one_place() -> None:
    calls = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "init_process_group"
            ):
                calls.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert len(calls) == 1 and calls[0].startswith("distributed/process_group.py:"), calls
