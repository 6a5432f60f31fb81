"""The run directory's layout is declared once (jeanzay_kit/rundir/run_layout.py, issue 44)."""

from __future__ import annotations

import ast
from pathlib import Path

import jeanzay_kit
from jeanzay_kit.rundir import run_layout

PACKAGE = Path(jeanzay_kit.__file__).parent
# Names that are also config keys and tracker names (metrics.tensorboard, metrics.wandb):
# spelled elsewhere as keys, never as paths (a path asks run_layout).
ALSO_KEYS = {run_layout.TENSORBOARD, run_layout.WANDB}


def test_no_other_module_spells_a_run_directory_name() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "run_layout.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in run_layout.NAMES - ALSO_KEYS:
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.value!r}")
    assert not found, "ask jeanzay_kit/rundir/run_layout.py instead:\n" + "\n".join(found)


def test_every_name_is_in_the_table_once_and_in_the_docs() -> None:
    names = [e.name for e in run_layout.ENTRIES]
    assert len(names) == len(set(names))
    declared = {v for k, v in vars(run_layout).items() if k.isupper() and isinstance(v, str)}
    assert declared == set(names)
    docs = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    missing = [n for n in names if f"| `{n}" not in docs]
    assert not missing, f"docs/architecture.md's run directory table lacks {missing}"
