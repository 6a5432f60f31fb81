"""A real small or read-only filesystem for fault tests: tmpfs, mounted as root (CI is)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def tmpfs(where: Path, options: str) -> Iterator[Path]:
    """Mount a tmpfs with `options` (e.g. "ro,size=1m", "size=3m") at `where`; skip the
    test when this is not root."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    where.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=False)


@contextmanager
def read_only_view(source: Path, where: Path) -> Iterator[Path]:
    """`source` seen read-only at `where` (a bind mount remounted ro: the kernel refuses
    writes even to root, which file modes do not); skip the test when this is not root."""
    if os.geteuid() != 0:
        pytest.skip("a bind mount needs root")
    where.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "--bind", str(source), str(where)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(where)], check=True)
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=False)
