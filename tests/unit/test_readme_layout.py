"""The Layout block (docs/architecture.md, linked from the README's "Where to start
reading") is true: every folder and file it names exists, every room is shown. A move that
forgets it fails here, not in a newcomer's first hour."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# A path the block names: `a/b.py`, `loop.py`, `strategies/` (not `$PWD/...`, `<run_dir>/`).
NAMED = re.compile(
    r"(?<![\w./$<*-])((?:[\w.-]+/)*[\w-]+(?:\.(?:py|sh|md|json|txt|toml|yaml)|/))(?![\w-])"
)


def _layout_block() -> list[str]:
    text = (ROOT / "docs" / "architecture.md").read_text()
    return text.split("## Layout\n", 1)[1].split("```", 2)[1].splitlines()[1:]


def named_paths(block: list[str]) -> list[tuple[str, list[Path]]]:
    """(what the README says, where it may be): a row starts at column 0 (the repository)
    or 2 (jeanzay_kit/); a name in its description is in the row's folder, at the
    repository's root, or in jeanzay_kit/ (`runtime/sampler.py` in the train/ row)."""
    out: list[tuple[str, list[Path]]] = []
    folder = ROOT
    for line in block:
        if line and not line.startswith("   "):
            base = ROOT / "jeanzay_kit" if line.startswith("  ") else ROOT
            head, _, rest = line.strip().partition(" ")
            folder = base / head if head.endswith("/") else base
            out.append((head, [base / head]))
        else:
            rest = line
        out += [
            (name, [folder / name, ROOT / name, ROOT / "jeanzay_kit" / name])
            for name in NAMED.findall(rest)
        ]
    return out


def test_every_path_the_readme_layout_names_exists() -> None:
    named = named_paths(_layout_block())
    assert len(named) > 40  # the block was read, not skipped
    missing = [name for name, places in named if not any(p.exists() for p in places)]
    assert not missing, f"docs/architecture.md's Layout names what is not there: {missing}"


def test_the_layout_shows_every_room_of_the_package() -> None:
    rows = {name for name, _ in named_paths(_layout_block())}
    rooms = {
        f"{p.name}/"
        for p in (ROOT / "jeanzay_kit").iterdir()
        if p.is_dir() and not p.name.startswith("__")
    }
    assert not rooms - rows, (
        f"rooms docs/architecture.md's Layout does not show: {sorted(rooms - rows)}"
    )
