"""A real small or read-only filesystem for fault tests, mounted as root (CI is): an ext4
image on a loop device where the kernel lends one (a disk's own inode table and
space), else a tmpfs with the same limits."""

from __future__ import annotations

import os
import shutil
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


# ext4 holds 11 inodes of its own (the reserved ones and lost+found) and rounds its
# inode table to whole blocks: the free inodes past `inodes` are taken by empty files
# in lost+found, so the count left is the one asked for.
EXT4_OWN_INODES = 11


@contextmanager
def small_filesystem(where: Path, megabytes: int, inodes: int | None = None) -> Iterator[Path]:
    """A filesystem of `megabytes` MiB with about `inodes` free inodes at `where`: an
    ext4 image loop-mounted (its folder's sibling, removed after), or a tmpfs where no
    loop device can be had (a container without /dev/loop*); skip when this is not root."""
    if os.geteuid() != 0:
        pytest.skip("mounting a filesystem needs root")
    where.mkdir(parents=True, exist_ok=True)
    image = where.parent / f".{where.name}.ext4"
    with open(image, "wb") as blank:
        blank.truncate(megabytes << 20)
    # -N is rounded to whole inode-table blocks, down as well as up: ask a multiple of 64.
    count = [] if inodes is None else ["-N", str((inodes + EXT4_OWN_INODES) // 64 * 64 + 64)]
    made = shutil.which("mkfs.ext4") is not None and _quiet(
        ["mkfs.ext4", "-q", "-F", "-m", "0", "-O", "^has_journal", *count, str(image)]
    )
    if not (made and _quiet(["mount", "-o", "loop", str(image), str(where)])):
        image.unlink()
        limits = f"size={megabytes}m" + ("" if inodes is None else f",nr_inodes={inodes + 1}")
        with tmpfs(where, limits):
            yield where
        return
    try:
        if inodes is not None:
            extra = os.statvfs(where).f_favail - inodes
            assert extra >= 0, f"{where}: ext4 made {inodes + extra} free inodes, not {inodes}"
            for i in range(extra):
                (where / "lost+found" / f"taken-{i}").touch()
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=False)
        image.unlink()


def _quiet(command: list[str]) -> bool:
    return subprocess.run(command, capture_output=True).returncode == 0


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
