"""What git says of a project: its files, commit and uncommitted changes. Edge: runs git
(argument lists, never a shell). Every function answers None or [] outside a git
repository or without git, so a project that is no repository still works."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path


def _git(root: Path, *args: str, ok: tuple[int, ...] = (0,)) -> bytes | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, timeout=120, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode in ok else None


def is_repository(root: Path) -> bool:
    """root is inside a git work tree (its top, or a project folder of a larger repo:
    then the project's files are those under root)."""
    inside = _git(root, "rev-parse", "--is-inside-work-tree")
    return inside is not None and inside.strip() == b"true"


def project_files(root: Path) -> list[str]:
    """Tracked files and untracked ones git does not ignore under root, relative to root
    (those that exist: a deleted tracked file is not copied)."""
    out = _git(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    if out is None:
        return []
    names = sorted({n for n in out.decode().split("\0") if n})
    return [n for n in names if (root / n).is_file()]


def untracked_files(root: Path, keep: Callable[[str], bool] | None = None) -> list[str]:
    """Untracked files git does not ignore (those `keep` accepts, when given)."""
    out = _git(root, "ls-files", "-z", "--others", "--exclude-standard")
    return sorted(n for n in (out or b"").decode().split("\0") if n and (keep is None or keep(n)))


def head_commit(root: Path) -> str | None:
    out = _git(root, "rev-parse", "HEAD")
    return out.decode().strip() if out else None


def branch(root: Path) -> str | None:
    out = _git(root, "rev-parse", "--abbrev-ref", "HEAD")
    return out.decode().strip() if out else None


def uncommitted_diff(root: Path, keep: Callable[[str], bool] | None = None) -> bytes:
    """Every change a commit would not reproduce: tracked files against HEAD (staged or
    not), then each untracked file as a new-file diff; with `keep`, only the files it
    accepts (code: a checkpoint or a dataset left in the tree is no change to record)."""
    changed = _git(root, "diff", "HEAD", "--name-only", "-z") or b""
    names = [n for n in changed.decode().split("\0") if n and (keep is None or keep(n))]
    parts = []
    if names:
        parts.append(
            _git(root, "diff", "HEAD", "--binary", "--", *(f":(literal){n}" for n in names)) or b""
        )
    for name in untracked_files(root, keep):
        # --no-index exits 1 when the files differ, which they always do here.
        parts.append(
            _git(root, "diff", "--binary", "--no-index", "--", "/dev/null", name, ok=(0, 1)) or b""
        )
    return b"".join(parts)
