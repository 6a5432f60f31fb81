"""The checkpoint folder on disk: list, verify, commit atomically, apply retention.

File I/O only (no torch.distributed): the rank that commits calls `commit`; anyone can
list and verify, including `jzk ckpt`. The rules live in ckpt/layout.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from jeanzay_kit.ckpt.checksum import (
    DEFAULT_ALGORITHM,
    algorithm_of,
    checksum_text,
    new_hasher,
)
from jeanzay_kit.ckpt.layout import (
    MANIFEST,
    TMP_PREFIX,
    TRASH_PREFIX,
    Entry,
    FileRecord,
    Manifest,
    best_step,
    compare_files,
    config_change_message,
    newest_first,
    parse_manifest,
    parse_step_dir,
    shape_changes,
    step_dir_name,
    tmp_dir_name,
    to_delete,
    trash_dir_name,
    world_change,
)
from jeanzay_kit.config.identity import resume_hash
from jeanzay_kit.durable_io import fsync_dir, write_durably
from jeanzay_kit.errors import ManifestError, ResumeError
from jeanzay_kit.rundir.run_directory import RunDir
from jeanzay_kit.values import as_node

_CHUNK = 8 << 20


def checksum_file(path: Path, algorithm: str = DEFAULT_ALGORITHM) -> str:
    hasher = new_hasher(algorithm)
    with path.open("rb") as f:
        while block := f.read(_CHUNK):
            hasher.update(block)
    return checksum_text(algorithm, hasher)


class CheckpointStore:
    def __init__(self, root: Path):
        self.root = Path(root)

    def step_dir(self, step: int) -> Path:
        return self.root / step_dir_name(step)

    def tmp_dir(self, step: int) -> Path:
        return self.root / tmp_dir_name(step)

    def entries(self) -> list[Entry]:
        if not self.root.is_dir():
            return []
        out = []
        for child in self.root.iterdir():
            step = parse_step_dir(child.name)
            if step is not None and child.is_dir():
                out.append(Entry(step, child.name, (child / MANIFEST).is_file()))
        return newest_first(out)

    def manifest(self, step: int) -> Manifest:
        return parse_manifest((self.step_dir(step) / MANIFEST).read_text())

    def measure(
        self, folder: Path, names: list[str], algorithms: dict[str, str] | None = None
    ) -> dict[str, FileRecord | None]:
        """Size and checksum of each file (None: missing), hashed in parallel (the hashes
        release the GIL on large buffers, so threads use every core). algorithms: per
        file, the one its manifest used (default: the current one)."""
        algorithms = algorithms or {}

        def one(name: str) -> FileRecord | None:
            path = folder / name
            if not path.is_file():
                return None
            algorithm = algorithms.get(name, DEFAULT_ALGORITHM)
            return FileRecord(path.stat().st_size, checksum_file(path, algorithm))

        with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
            return dict(zip(names, pool.map(one, names), strict=True))

    def problems(self, step: int) -> list[str]:
        """Everything wrong with checkpoint `step` (empty: complete and intact)."""
        folder = self.step_dir(step)
        if not (folder / MANIFEST).is_file():
            return ["no manifest: the save did not finish"]
        try:
            manifest = self.manifest(step)
        except (OSError, ManifestError) as err:
            return [f"{MANIFEST}: {err}"]
        if manifest.step != step:
            return [f"{MANIFEST} says step {manifest.step}, folder says {step}"]
        algorithms = {name: algorithm_of(rec.checksum) for name, rec in manifest.files.items()}
        try:
            found = self.measure(folder, list(manifest.files), algorithms)
        except ValueError as err:  # a checksum algorithm this version does not know
            return [f"{MANIFEST}: {err}"]
        return compare_files(manifest, found)

    def newest_good(self, report: Callable[[str], None] = print) -> int | None:
        """The newest complete, intact checkpoint; damaged ones are reported and skipped."""
        for entry in self.entries():
            if not entry.has_manifest:
                continue
            problems = self.problems(entry.step)
            if not problems:
                return entry.step
            report(f"checkpoint {entry.name} is damaged, skipping it: " + "; ".join(problems))
        return None

    def commit(
        self, step: int, manifest_fields: dict, known: dict[str, FileRecord] | None = None
    ) -> Manifest:
        """Seal the temporary folder of `step`: checksums, fsync, rename, manifest last.

        known: checksums taken while the files were written (trusted when the size on
        disk agrees); any other file is read back and hashed here.
        """
        tmp = self.tmp_dir(step)
        known = known or {}
        # The writers fsynced their files (DCP's writer and _save_bytes both do).
        names = sorted(str(p.relative_to(tmp)) for p in tmp.rglob("*") if p.is_file())
        files: dict[str, FileRecord] = {}
        unknown = []
        for name in names:
            rec = known.get(name)
            if rec is not None and (tmp / name).stat().st_size == rec.size:
                files[name] = rec
            else:
                unknown.append(name)
        files.update({n: r for n, r in self.measure(tmp, unknown).items() if r is not None})
        manifest = Manifest(step=step, files=files, **manifest_fields)
        final = self.step_dir(step)
        if final.exists():  # an older, unsealed attempt at the same step
            shutil.rmtree(final)
        for sub in [tmp, *[p for p in tmp.rglob("*") if p.is_dir()]]:
            fsync_dir(sub)
        os.replace(tmp, final)
        fsync_dir(self.root)
        write_durably(final / MANIFEST, manifest.to_json().encode())
        return manifest

    def remove_stale(self) -> list[str]:
        """Delete leftovers of interrupted saves: temporary folders and unsealed step folders."""
        removed: list[str] = []
        if not self.root.is_dir():
            return removed
        for child in self.root.iterdir():
            unsealed = parse_step_dir(child.name) is not None and not (child / MANIFEST).exists()
            leftover = child.name.startswith((TMP_PREFIX, TRASH_PREFIX))
            if child.is_dir() and (leftover or unsealed):
                shutil.rmtree(child, ignore_errors=True)
                removed.append(child.name)
        return removed

    def apply_retention(
        self,
        keep_last: int,
        newest_good: int | None,
        delete: bool = True,
        keep_best: tuple[str, str] | None = None,
    ) -> list[str]:
        """Keep the newest `keep_last` complete checkpoints (and always the newest good one).

        Each dropped folder is first renamed to .trash-step-N, so that it stops counting
        in one atomic step; with delete=False the deletion is left to empty_trash (the
        checkpointer runs it off the training thread: unlinking GBs takes a while)."""
        entries = self.entries()
        good = [
            e.step
            for e in entries
            if e.has_manifest and (newest_good is None or e.step <= newest_good)
        ]
        protect = [] if keep_best is None else [self.best(keep_best, good)]
        removed = []
        for entry in to_delete(entries, keep_last, good, [s for s in protect if s is not None]):
            trash = self.root / trash_dir_name(entry.step)
            if trash.exists():  # an older copy of this step, still being deleted
                shutil.rmtree(trash, ignore_errors=True)
            os.replace(self.root / entry.name, trash)
            removed.append(entry.name)
        if removed and delete:
            fsync_dir(self.root)
        if delete:
            self.empty_trash()
        # delete=False: the renames are made durable by empty_trash, off the training
        # thread (lost in a crash, a dropped step comes back and is dropped again).
        return removed

    def best(self, keep_best: tuple[str, str], steps: Iterable[int]) -> int | None:
        """Of these complete steps, the one whose manifest's evaluation is the best."""
        evaluated = {}
        for step in steps:
            try:
                evaluated[step] = dict(as_node(self.manifest(step).extra.get("eval")))
            except (OSError, ManifestError):
                continue
        return best_step(evaluated, *keep_best)

    def empty_trash(self) -> None:
        emptied = False
        for child in self.root.glob(f"{TRASH_PREFIX}*"):
            shutil.rmtree(child, ignore_errors=True)
            emptied = True
        if emptied:
            with contextlib.suppress(OSError):
                fsync_dir(self.root)


def archived_note(run: RunDir) -> str | None:
    """Where `jzk ckpt archive --remove` put this run's checkpoints, and the command that
    brings them back, or None (no such record, or one that cannot be read)."""
    try:
        record = json.loads(run.archived.read_text())
        where, names = str(record["archive"]), list(record["folders"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return (
        f"its {len(names)} checkpoint(s) were archived into {where} and removed (jzk ckpt "
        f"archive --remove). HINT: jzk ckpt restore '{where}' '{run.root}' brings them "
        "back; to start afresh instead, give the run another job.name (or job.run_dir)"
    )


def _refuse_archived(run_dir: RunDir) -> None:
    """A run whose checkpoints went into an archive does not begin again from step 0."""
    if (note := archived_note(run_dir)) is not None:
        raise ResumeError(f"{run_dir.root} would train again from step 0: {note}")


def check_resume_early(
    run_dir: RunDir,
    config: Mapping[str, Any],
    world: Mapping[str, Any],
    resume: str,
    allow_change: bool,
) -> None:
    """Refuse a changed config or layout before any worker starts (the workers check again).

    Reads only the newest complete checkpoint's manifest and config.json: no checksums
    and no torch, so `python train.py` with another experiment's run directory fails in
    well under a second instead of after starting its workers. `world` is this run's
    layout (ParallelLayout.checkpoint_world): a different number of data-parallel ranks
    is fine, a different split of the model is refused even with allow_change
    (checkpoint.allow_config_change), which only lets other config keys differ.
    """
    if resume == "never":
        return
    if resume == "auto":
        store = CheckpointStore(run_dir.checkpoints)
        complete = [e for e in store.entries() if e.has_manifest]
        if not complete:
            _refuse_archived(run_dir)
            return
        folder = store.step_dir(complete[0].step)
    else:
        folder = Path(resume)
    try:
        manifest = parse_manifest((folder / MANIFEST).read_text())
        refusal, _note = world_change(str(folder), manifest.world, world)
        if refusal:
            raise ResumeError(refusal)
        if manifest.config_hash == resume_hash(config):
            return
        old = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return  # unreadable or damaged: the workers' own checks report it precisely
    if allow_change:
        check_shape(str(folder), old, config)
        return
    raise ResumeError(config_change_message(str(folder), old, config))


def check_shape(folder: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
    """Refuse a model shape change, which checkpoint.allow_config_change cannot allow."""
    changes = shape_changes(old, new)
    if changes:
        raise ResumeError(
            f"{folder} holds another model: {'; '.join(changes)}. Its tensors cannot be "
            "loaded into this one, even with checkpoint.allow_config_change=true. HINT: set "
            f"{changes[0].split(':')[0]} back, or resume=never (or another job.run_dir) "
            "to start this model from scratch"
        )
