"""What a request will write on each filesystem, against what is left there.

Jean Zay counts files (inodes) as well as bytes per project: $WORK holds 500k files,
$STORE 100k (IDRIS, "Disk spaces"), and "Disk quota exceeded" comes from the file count
long before the bytes for a sweep of small runs or a checkpoint of many shards. Here,
before the queue: the files and bytes of every place the request writes (checkpoints,
the run directories, the logs, the code snapshot), summed per filesystem, against the
room left there (what statvfs says, bounded by the tier's declared quota and by what its
quota command says is left). Pure: plain values in, lines out; launch/storage.py
measures and decides.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from jeanzay_kit.launch.footprint import RUN_FILES
from jeanzay_kit.values import human_bytes


@dataclass(frozen=True)
class Request:
    """The parts of a validated request that decide what it writes."""

    runs: int  # run directories (sweep points, array tasks)
    ranks: int
    keep_last: int
    keep_best: bool
    checkpoint_files: int  # the most files one checkpoint holds (launch/footprint.py)
    checkpoint_bytes: int | None  # one checkpoint's bytes, when known
    run_dir: str  # absolute; a sweep's run directories are beside it
    checkpoint_dir: str | None  # checkpoint.dir, expanded (None: in the run directory)
    log_dir: str
    snapshot_files: int = 0
    snapshot_bytes: int = 0


@dataclass(frozen=True)
class Write:
    what: str
    where: str  # the folder written (absolute)
    files: int
    bytes: int | None  # None: not known before the first save


@dataclass(frozen=True)
class Room:
    """What is left on the filesystem holding a place."""

    device: int  # places on one filesystem share it (st_dev)
    files: int | None  # free inodes (None: the filesystem does not count them)
    bytes: int | None
    tier: str | None = None  # the profile's name for it (cluster.storage)
    said_by: str | None = None  # the quota command that bounded it (its program's name)


@dataclass(frozen=True)
class QuotaLeft:
    """What a quota report leaves: its lowest limit set (soft or hard) less the use."""

    files: int | None  # None: no limit set
    bytes: int | None


def quota_left(text: str) -> QuotaLeft | None:
    """The first filesystem of a report in the columns `lfs quota` and Linux's `quota`
    print (Lustre manual, "lfs quota"; quota(1)): a header `Filesystem <space> quota limit
    grace files quota limit grace`, then the filesystem and its values, on one line or
    two (lfs wraps a long name). A used value past its soft limit ends with `*`; a grace
    column is `-`, a time, or blank. 0 is no limit. None: not such a report."""
    lines = text.splitlines()
    head = next((i for i, x in enumerate(lines) if x.split()[:1] == ["Filesystem"]), None)
    if head is None or "files" not in lines[head].split():
        return None
    words = " ".join(lines[head + 1 : head + 3]).split()[1:]
    values = [v for v in words if not _is_grace(v)]
    if len(values) < 6:
        return None
    space = [_amount(v, 2**10) for v in values[:3]]
    files = [_amount(v, 1) for v in values[3:6]]
    return QuotaLeft(_left(files), _left(space))


def _is_grace(word: str) -> bool:
    return _amount(word, 1) is None


def _amount(word: str, unit: int) -> int | None:
    """A value of the report (`1234`, `1234*`, `4.8G`, `1.2k`) in bytes (unit: what a bare
    number counts, KiB for space) or in files (unit 1; a suffix counts thousands, as
    `lfs quota -h` prints them); None: not a number (a grace column)."""
    word = word.rstrip("*")
    power = "KMGTP".find(word[-1:].upper()) + 1 if word[-1:].isalpha() else 0
    try:
        value = float(word[:-1] if power else word)
    except ValueError:
        return None
    if power:
        return int(value * (1024**power if unit > 1 else 1000**power))
    return int(value * unit)


def _left(used_soft_hard: list[int | None]) -> int | None:
    used, *limits = used_soft_hard
    set_ = [x for x in limits if x]
    if used is None or not set_:
        return None
    return max(0, min(set_) - used)


def writes(r: Request) -> list[Write]:
    """Each place the request writes, at its fullest: during a save the new checkpoint is
    complete before retention drops the oldest (keep_last + 1), and the best one is kept
    besides; with checkpoint.dir the run directory also holds the kept copies (newest,
    best)."""
    per_ckpt = r.checkpoint_files + 1  # its folder too
    held = r.keep_last + 1 + int(r.keep_best)
    out = [
        Write("checkpoint folders", r.checkpoint_dir or r.run_dir, r.runs * held * per_ckpt,
              _times(r.checkpoint_bytes, r.runs * held)),
        Write("run directories", r.run_dir, r.runs * (RUN_FILES + r.ranks), None),
        Write("logs", r.log_dir, r.runs * 2, None),
    ]  # fmt: skip
    if r.checkpoint_dir:
        kept = 1 + int(r.keep_best)
        out.append(
            Write("kept checkpoints", r.run_dir, r.runs * kept * per_ckpt,
                  _times(r.checkpoint_bytes, r.runs * kept))
        )  # fmt: skip
    if r.snapshot_files:
        out.append(Write("code snapshot", r.log_dir, r.snapshot_files, r.snapshot_bytes))
    return out


def _times(each: int | None, n: int) -> int | None:
    return None if each is None else each * n


@dataclass(frozen=True)
class _OneFilesystem:
    """What the request writes on one filesystem, summed, and the room left there."""

    writes: list[Write]
    room: Room

    @property
    def where(self) -> str:
        return self.writes[0].where

    @property
    def files(self) -> int:
        return sum(w.files for w in self.writes)

    @property
    def bytes(self) -> int | None:
        known = [w.bytes for w in self.writes if w.bytes is not None]
        return sum(known) if known else None


def _by_filesystem(planned: Sequence[Write], rooms: Mapping[str, Room]) -> list[_OneFilesystem]:
    """The writes grouped by the filesystem holding them (rooms: `where` -> its room)."""
    groups: dict[int, list[Write]] = {}
    for w in planned:
        groups.setdefault(rooms[w.where].device, []).append(w)
    return [_OneFilesystem(group, rooms[group[0].where]) for group in groups.values()]


def shortfalls(planned: Sequence[Write], rooms: Mapping[str, Room]) -> list[str]:
    """One line per filesystem the request does not fit on (files or bytes), naming
    what it writes there; empty: it fits. rooms: each write's `where` -> its room."""
    lines = []
    for fs in _by_filesystem(planned, rooms):
        room, size = fs.room, fs.bytes
        parts = ", ".join(f"{w.what} {w.files:,}" for w in fs.writes)
        place = f"{room.tier} ({fs.where})" if room.tier else fs.where
        if room.files is not None and fs.files > room.files:
            lines.append(f"{fs.files:,} files on {place} ({parts}) where {room.files:,} are left")
        if room.bytes is not None and size is not None and size > room.bytes:
            lines.append(f"{human_bytes(size)} on {place} where {human_bytes(room.bytes)} are left")
    return lines


def fit_lines(planned: Sequence[Write], rooms: Mapping[str, Room]) -> list[str]:
    """`jzk validate`'s lines: per filesystem, what the request writes and what is left."""
    lines = []
    for fs in _by_filesystem(planned, rooms):
        room = fs.room
        size = "" if fs.bytes is None else f", {human_bytes(fs.bytes)}"
        left_files = "?" if room.files is None else f"{room.files:,}"
        left_bytes = "?" if room.bytes is None else human_bytes(room.bytes)
        said = f" ({room.said_by}'s report counted)" if room.said_by else ""
        lines.append(
            f"storage         {room.tier or fs.where}: at most {fs.files:,} files{size} "
            f"({', '.join(w.what for w in fs.writes)}); left {left_files} files, "
            f"{left_bytes}{said}"
        )
    return lines
