"""Checkpoints on a fast tier, and the ones worth keeping where the run lasts.

With `checkpoint.dir` set (e.g. $SCRATCH/jzk-checkpoints), <run_dir>/checkpoints is a
link to the run's own folder there (`fast_root`), so every save, resume, `jzk ckpt`
and `jzk status` works through it unchanged, at the fast tier's speed. The run
directory's tier ($WORK) keeps what must outlast a purge: at the end of each job the
newest complete checkpoint and the best one (checkpoint.keep_best) are copied into
<run_dir>/kept/ (`keep`), each checked against its manifest's checksums; the final
model is written in the run directory already. Before a resume, a fast folder that
lost its checkpoints (scratch purged files unused for 30 days) gets the newest kept
one back (`place`). Rank 0 only; the callers agree around it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path

from jeanzay_kit.ckpt.layout import MANIFEST, parse_step_dir, step_dir_name, tmp_dir_name
from jeanzay_kit.ckpt.store import CheckpointStore
from jeanzay_kit.durable_io import fsync_dir
from jeanzay_kit.errors import JzkError
from jeanzay_kit.rundir.run_directory import RunDir
from jeanzay_kit.values import expand_vars

Log = Callable[[str], None]


def fast_root(checkpoint_dir: str, run: RunDir, env: Mapping[str, str]) -> Path:
    """The run's folder below checkpoint.dir: the run directory's name and a digest of
    its absolute path (two runs of one name in two projects never share it)."""
    where = Path(expand_vars(checkpoint_dir, env)).expanduser()
    absolute = str(run.root.resolve())
    return where / f"{run.root.name}-{hashlib.sha256(absolute.encode()).hexdigest()[:8]}"


def refuse_stale(checkpoint_dir: str | None, run: RunDir, env: Mapping[str, str]) -> None:
    """JzkError when a start would resume from the run's fast folder unseen: it holds
    checkpoints, but the run directory has no record of a start (removed since, or made
    again by hand), so the run would go on from a run it does not know. Made on the
    node (node/entry.py) and by `jzk submit`, before anything is written."""
    if not checkpoint_dir or run.starts.exists() or run.checkpoints.is_symlink():
        return
    fast = fast_root(checkpoint_dir, run, env)
    complete = [e.step for e in CheckpointStore(fast).entries() if e.has_manifest]
    if not complete:
        return
    raise JzkError(
        f"checkpoint.dir: {fast} holds step-{max(complete)} of an earlier run of {run}, "
        "which has no record of it (its run directory was removed?): this run would resume "
        f"from it unseen. HINT: remove it to start afresh (rm -r '{fast}'), or give the "
        "run another job.name (or job.run_dir)"
    )


def place(run: RunDir, fast: Path, log: Log) -> None:
    """<run_dir>/checkpoints made a link to `fast`, and `fast` given back the newest kept
    checkpoint when it has none as new (a purge). A run that already saved in its run
    directory keeps its checkpoints there (said once)."""
    link = run.checkpoints
    if link.is_dir() and not link.is_symlink():
        if any(link.iterdir()):
            log(f"checkpoint.dir: {link} holds this run's checkpoints already: they stay there")
            return
        link.rmdir()
    fast.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() and Path(os.readlink(link)) != fast:
        link.unlink()
    if not link.is_symlink():
        link.symlink_to(fast, target_is_directory=True)
    _restore_newest(CheckpointStore(run.kept), CheckpointStore(fast), log)


def _restore_newest(kept: CheckpointStore, fast: CheckpointStore, log: Log) -> None:
    have = fast.newest_good(report=log)
    saved = kept.newest_good(report=log)
    if saved is None or (have is not None and have >= saved):
        return
    copy_checkpoint(kept.step_dir(saved), fast)
    lost = "has none" if have is None else f"has only step {have}"
    log(
        f"checkpoint.dir: {fast.root} {lost} (purged?): step {saved} copied back from "
        f"{kept.root}; the run goes on from there"
    )


def keep(run: RunDir, keep_best: tuple[str, str] | None, log: Log) -> list[int]:
    """Copy the newest complete checkpoint and the best one (keep_best: its metrics key
    and direction) from the fast tier into <run_dir>/kept/, dropping older kept ones;
    the steps kept. Nothing to do when the checkpoints are in the run directory."""
    if not run.checkpoints.is_symlink():
        return []
    fast, kept = CheckpointStore(run.checkpoints), CheckpointStore(run.kept)
    newest = fast.newest_good(report=log)
    complete = [e.step for e in fast.entries() if e.has_manifest]
    best = None if keep_best is None else fast.best(keep_best, complete)
    wanted = sorted({s for s in (newest, best) if s is not None})
    for step in wanted:
        if not (kept.step_dir(step) / MANIFEST).is_file():
            copy_checkpoint(fast.step_dir(step), kept)
    for entry in kept.entries():
        if entry.step not in wanted:
            shutil.rmtree(kept.step_dir(entry.step), ignore_errors=True)
    if wanted:
        log(f"kept step(s) {', '.join(map(str, wanted))} in {kept.root} (checkpoint.dir)")
    return wanted


def copy_checkpoint(folder: Path, into: CheckpointStore) -> Path:
    """A complete checkpoint folder copied into a store as it commits one: aside, every
    file flushed, the manifest last, renamed into place, then checked against the
    manifest's checksums (a copy that differs is removed and raises OSError)."""
    step = parse_step_dir(folder.name)
    assert step is not None, folder
    into.root.mkdir(parents=True, exist_ok=True)
    tmp = into.root / tmp_dir_name(step)
    shutil.rmtree(tmp, ignore_errors=True)
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    try:
        for src in sorted(files, key=lambda p: p.name == MANIFEST):  # the manifest last
            dst = tmp / src.relative_to(folder)
            dst.parent.mkdir(parents=True, exist_ok=True)
            _copy_durably(src, dst)
        fsync_dir(tmp)
    except OSError:  # a full disk or quota: give back what the copy took
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    final = into.root / step_dir_name(step)
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    fsync_dir(into.root)
    problems = into.problems(step)
    if problems:
        shutil.rmtree(final, ignore_errors=True)
        raise OSError(f"the copy of {folder} to {final} differs: {'; '.join(problems)}")
    return final


def _copy_durably(src: Path, dst: Path) -> None:
    with src.open("rb") as inp, dst.open("wb") as out:
        shutil.copyfileobj(inp, out, 8 << 20)
        out.flush()
        os.fsync(out.fileno())
