"""The places a site offers to write (cluster.storage) and which one a path is on.

Jean Zay has four (IDRIS, "Disk spaces"): $SCRATCH (fast, large, files unused for 30
days purged), $WORK (kept; 5 TB and 500k inodes per project), $STORE (long-term, 50 TB
and 100k inodes: few large files) and $JOBSCRATCH (one job's). A profile names each
with its path ($VARS as the machine has them), its quota in files and bytes where the
site sets one, the command that says what is left of it (`lfs quota`, `quota`), and its
purge age. Pure: plain values in, values out; the paths are
expanded by the caller (the environment is read at the edge).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from jeanzay_kit.errors import Problem, SpecError

TIER_KEYS = ("path", "files", "bytes", "purge_days", "quota")
_BYTE_UNITS = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40, "P": 2**50}


@dataclass(frozen=True)
class StorageTier:
    name: str  # scratch, work, store, jobscratch (the profile's own names)
    path: str  # as written: $SCRATCH, /lustre/fs/scratch...
    files: int | None = None  # the quota's inodes (None: not set by the site)
    bytes: int | None = None  # the quota's bytes
    purge_days: int | None = None  # files unused this long are removed (scratch)
    # A command printing the quota's use and limits in `lfs quota`'s columns (Lustre's
    # `lfs quota -g GROUP PATH`, Linux's `quota -w -f PATH`); () : not read.
    quota: tuple[str, ...] = ()


def size_bytes(value: object) -> int | None:
    """A size as profiles write it ("5T", "500G", 1024: bytes) in bytes; None if invalid."""
    text = str(value).strip().upper().removesuffix("B").removesuffix("I")
    unit = text[-1] if text and text[-1] in _BYTE_UNITS else ""
    number = text[:-1] if unit else text
    if not number.isdigit():
        return None
    return int(number) * _BYTE_UNITS.get(unit, 1)


def storage_tiers(node: object) -> tuple[StorageTier, ...]:
    """cluster.storage, checked: a mapping of tier names to {path, files, bytes,
    purge_days, quota}."""
    if node is None:
        return ()
    if not isinstance(node, Mapping):
        raise SpecError(Problem("cluster.storage", node, "must be a mapping of tier names"))
    return tuple(_tier(str(name), value) for name, value in node.items())


def _tier(name: str, node: object) -> StorageTier:
    prefix = f"cluster.storage.{name}"
    if not isinstance(node, Mapping):
        raise SpecError(Problem(prefix, node, "must be a mapping", "e.g. {path: $WORK}"))
    unknown = [k for k in node if k not in TIER_KEYS]
    if unknown:
        raise SpecError(
            Problem(f"{prefix}.{unknown[0]}", node[unknown[0]], "is not a known key",
                    f"use one of {', '.join(TIER_KEYS)} (docs/storage.md)")
        )  # fmt: skip
    path = node.get("path")
    if not isinstance(path, str) or not path.strip():
        raise SpecError(Problem(f"{prefix}.path", path, "must be a path", "e.g. $SCRATCH"))
    limits = []
    for key in ("files", "bytes", "purge_days"):
        value = node.get(key)
        number = None if value is None else (size_bytes(value) if key == "bytes" else value)
        if value is not None and (not isinstance(number, int) or isinstance(number, bool)
                                  or number <= 0):  # fmt: skip
            raise SpecError(
                Problem(f"{prefix}.{key}", value, "must be a positive whole number"
                        + (" or a size such as 5T" if key == "bytes" else ""))
            )  # fmt: skip
        limits.append(number)
    quota = _quota_command(prefix, node.get("quota"))
    return StorageTier(name, path, limits[0], limits[1], limits[2], quota)


def _quota_command(prefix: str, value: object) -> tuple[str, ...]:
    """The quota command as an argument list ($VARS expanded on the machine)."""
    if value is None:
        return ()
    words = value if isinstance(value, Sequence) and not isinstance(value, str) else ()
    if words and all(isinstance(a, str) and a for a in words):
        return tuple(words)
    raise SpecError(
        Problem(f"{prefix}.quota", value, "must be a command as a list of words",
                "e.g. [lfs, quota, -g, $GROUP, $WORK] (docs/storage.md)")
    )  # fmt: skip


def tier_of(path: str, tiers: Sequence[StorageTier], expanded: Mapping[str, str]) -> str | None:
    """The name of the tier holding `path` (absolute, expanded): the one whose expanded
    path is its longest prefix; None: on no declared tier. expanded: tier name -> its
    path as the machine resolves it (an unresolved $VAR matches nothing)."""
    best: tuple[int, str] | None = None
    for tier in tiers:
        root = expanded.get(tier.name, "").rstrip("/")
        if not root or "$" in root:
            continue
        inside = path == root or path.startswith(root + "/")
        if inside and (best is None or len(root) > best[0]):
            best = (len(root), tier.name)
    return None if best is None else best[1]


# Days before a tier's purge age at which `jzk status` names a checkpoint there.
PURGE_MARGIN_DAYS = 7


def purge_note(
    run_dir: str,
    step: int,
    age_days: float,
    tier: StorageTier | None,
    kept: bool,
    linked: bool = True,
) -> str | None:
    """`jzk status`'s line on a resumable run whose newest checkpoint sits on a purged
    tier (scratch) and nears its purge age, with the command that keeps it; None when
    it is safe (no purge, kept on the run directory's tier already, young enough).
    linked: the checkpoints are on checkpoint.dir; else the run directory itself is
    on that tier, and a job's end keeps nothing elsewhere."""
    if tier is None or tier.purge_days is None or kept:
        return None
    if age_days < tier.purge_days - PURGE_MARGIN_DAYS:
        return None
    other_way = (
        "or run it again: each job's end keeps its newest checkpoint in <run_dir>/kept"
        if linked
        else f"or move the run directory off {tier.name} (its record goes with it)"
    )
    return (
        f"{run_dir}: its newest checkpoint, step {step}, is on {tier.name} and was written "
        f"{age_days:.0f} days ago; {tier.name} removes files unused for {tier.purge_days} "
        f"days. HINT: jzk ckpt archive {run_dir} --to $STORE (one file), {other_way}"
    )
