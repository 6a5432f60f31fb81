"""The storage check before the queue (`jzk validate`, `jzk submit`, `jzk tune`): what the
request writes on each filesystem (launch/storage_rules.py) against what is left there,
refused in one line with a change that fits (docs/storage.md).

What is left is the filesystem's own count (statvfs, as `df -i` and `df` show it),
bounded by the tier's declared quota (cluster.storage) and by what its quota command
says is left (`quota:`, a report in `lfs quota`'s columns). IDRIS's idr_quota_user and
idr_quota_project are not read: their output format is not published, and they are
updated once a day (IDRIS, "Disk spaces").
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from jeanzay_kit.config.sections import WRITER_THREADS_MAX
from jeanzay_kit.config.spec import JobSpec
from jeanzay_kit.config.storage_rules import tier_of
from jeanzay_kit.errors import JzkError
from jeanzay_kit.launch.footprint import Footprint
from jeanzay_kit.launch.storage_rules import (
    QuotaLeft,
    Request,
    Room,
    fit_lines,
    quota_left,
    shortfalls,
    writes,
)
from jeanzay_kit.rundir.run_directory import RunDir
from jeanzay_kit.values import expand_vars


def room_of(path: str, spec: JobSpec, env: Mapping[str, str]) -> Room:
    """What is left where `path` will be (its nearest existing folder), bounded by the
    quota of the declared tier holding it: its declared size and what its quota command
    says is left of it."""
    existing = Path(path)
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    st = os.statvfs(existing)
    files = st.f_favail if st.f_files else None  # 0 inodes in all: not counted (btrfs...)
    # 0 blocks in all: a pseudo filesystem (/proc): no room to forecast; whether it can be
    # written at all is said by the writability checks, with the key to change.
    size = st.f_bavail * st.f_frsize if st.f_blocks else None
    tiers = spec.cluster.storage
    expanded = {t.name: os.path.abspath(expand_vars(t.path, env)) for t in tiers}
    name = tier_of(os.path.abspath(path), tiers, expanded)
    tier = next((t for t in tiers if t.name == name), None)
    if tier is not None and tier.files is not None:
        files = tier.files if files is None else min(files, tier.files)
    if tier is not None and tier.bytes is not None:
        size = tier.bytes if size is None else min(size, tier.bytes)
    said_by = None
    if tier is not None and tier.quota:
        command = tuple(expand_vars(word, env) for word in tier.quota)
        if (left := _quota_says(command, f"cluster.storage.{tier.name}.quota")) is not None:
            files, size = _lower(files, left.files), _lower(size, left.bytes)
            said_by = os.path.basename(command[0])
    return Room(os.stat(existing).st_dev, files, size, name, said_by)


def _lower(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


@functools.cache
def _quota_says(command: tuple[str, ...], key: str) -> QuotaLeft | None:
    """What the tier's quota command says is left, asked once per command in a process
    (a forecast weighs several changes); None, said in one line, when it cannot be read:
    the declared quota and the filesystem's own count still bound the forecast."""
    why = None
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as err:
        why = str(err)
    else:
        # A report is read whatever the exit: quota(1) exits 1 when a limit is passed.
        if (left := quota_left(out.stdout)) is not None:
            return left
        said = (out.stderr.strip().splitlines() or [""])[-1]
        why = f"exit {out.returncode}" + (f": {said}" if said else ", no quota report read")
    print(
        f"jzk: warning: {key}: `{' '.join(command)}` said nothing usable ({why}); only the "
        "declared quota and the filesystem's own count are checked",
        file=sys.stderr,
    )
    return None


def writer_threads_of(spec: JobSpec) -> int:
    """The writer threads the forecast counts: checkpoint.writer_threads (the toolkit's
    loop reads it; a script's session does not), else the most (the nodes' cores are not
    known on the login node)."""
    if spec.job.runs_script:
        return WRITER_THREADS_MAX
    return spec.checkpoint.writer_threads or WRITER_THREADS_MAX


def request_of(
    spec: JobSpec,
    workdir: Path,
    env: Mapping[str, str],
    runs: int = 1,
    snapshot: tuple[int, int] = (0, 0),
    checkpoint_bytes: int | None = None,
) -> Request:
    fp = Footprint(
        runs,
        spec.layout.world_size,
        spec.checkpoint.keep_last,
        0,
        checkpoint_bytes,
        writer_threads=writer_threads_of(spec),
    )
    ckpt_dir = spec.checkpoint.dir
    return Request(
        runs=runs,
        ranks=spec.layout.world_size,
        keep_last=spec.checkpoint.keep_last,
        keep_best=spec.checkpoint.keep_best is not None,
        checkpoint_files=fp.checkpoint_files,
        checkpoint_bytes=checkpoint_bytes,
        run_dir=os.path.abspath(workdir / spec.checkpoint.run_dir),
        checkpoint_dir=None if not ckpt_dir else os.path.abspath(expand_vars(ckpt_dir, env)),
        log_dir=os.path.abspath(workdir / spec.job.log_dir),
        snapshot_files=snapshot[0],
        snapshot_bytes=snapshot[1],
    )


def rooms_of(request: Request, spec: JobSpec, env: Mapping[str, str]) -> dict[str, Room]:
    """Each write's place -> the room left there, counting the files the run already holds
    on that filesystem as its own (a run submitted again replaces them, it does not add)."""
    rooms = {w.where: room_of(w.where, spec, env) for w in writes(request)}
    own = _files_held(RunDir.of(request.run_dir))
    for where, room in rooms.items():
        if room.files is not None:
            rooms[where] = replace(room, files=room.files + own.get(room.device, 0))
    return rooms


def _files_held(run: RunDir) -> dict[int, int]:
    """The files and folders of an existing run directory, and of its checkpoints' folder
    on another tier (the `checkpoints` link of checkpoint.dir), per filesystem."""
    held: dict[int, int] = {}
    link = run.checkpoints
    for top in (run.root, *([link.resolve()] if link.is_symlink() else [])):
        if not top.is_dir():
            continue
        device = top.stat().st_dev
        count = sum(len(dirs) + len(files) for _, dirs, files in os.walk(top))
        held[device] = held.get(device, 0) + count + 1
    return held


def _shortfalls(request: Request, spec: JobSpec, env: Mapping[str, str]) -> list[str]:
    return shortfalls(writes(request), rooms_of(request, spec, env))


def storage_lines(request: Request, spec: JobSpec, env: Mapping[str, str]) -> list[str]:
    return fit_lines(writes(request), rooms_of(request, spec, env))


def check_storage(request: Request, spec: JobSpec, env: Mapping[str, str]) -> None:
    """Refuse a request that cannot fit where it writes, with the first change that fits:
    its checkpoints on the profile's fast tier (a tier with a purge age: scratch), then
    one checkpoint kept (checkpoint.keep_last=1), then one writer thread per rank
    (checkpoint.writer_threads=1: fewer files, slower saves)."""
    problems = _shortfalls(request, spec, env)
    if not problems:
        return
    hint = _a_change_that_fits(request, spec, env)
    raise JzkError(
        f"the request does not fit where it writes: {'; '.join(problems)}. HINT: "
        + (hint or "free space or files there, or ask for a larger quota (docs/storage.md)")
    )


def _a_change_that_fits(request: Request, spec: JobSpec, env: Mapping[str, str]) -> str | None:
    candidates: list[tuple[str, Request]] = []
    fast = next((t for t in spec.cluster.storage if t.purge_days is not None), None)
    if fast is not None and request.checkpoint_dir is None:
        where = f"{fast.path}/jzk-checkpoints"
        moved = replace(request, checkpoint_dir=os.path.abspath(expand_vars(where, env)))
        candidates.append((f"checkpoint.dir={where} (the {fast.name} tier)", moved))
    if request.keep_last > 1:
        candidates.append(("checkpoint.keep_last=1", replace(request, keep_last=1)))
    one_thread = Footprint(
        runs=request.runs,
        ranks=request.ranks,
        keep_last=request.keep_last,
        snapshot_files=0,
        checkpoint_bytes=None,
        writer_threads=1,
    )
    if not spec.job.runs_script and one_thread.checkpoint_files < request.checkpoint_files:
        fewer = replace(request, checkpoint_files=one_thread.checkpoint_files)
        candidates.append(("checkpoint.writer_threads=1 (fewer files, slower saves)", fewer))
    for words, changed in candidates:
        if not _shortfalls(changed, spec, env):
            return f"{words}: then it fits"
    return None
