"""`jzk ckpt archive` / `jzk ckpt restore`: a run's checkpoints as one file on the tier
made for few large files ($STORE on Jean Zay: 100k files per project, IDRIS "Disk
spaces"), and back.

The archive is an uncompressed tar (tensors hardly compress; tar keeps every byte and
the folders as they were): the complete step folders of <run_dir>/checkpoints and
<run_dir>/kept, then SHA256SUMS, the digest of every member, last. It is written aside,
flushed and renamed, so a partial archive never carries the final name. A restore
unpacks into the run directory (the checkpoints' own folder, through the checkpoint.dir
link), refusing any member outside it, and checks each file against SHA256SUMS and
each checkpoint against its manifest's checksums: bit for bit, or it says what differs.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tarfile
from collections.abc import Callable
from pathlib import Path

from jeanzay_kit.ckpt.store import CheckpointStore
from jeanzay_kit.durable_io import write_durably
from jeanzay_kit.errors import JzkError
from jeanzay_kit.rundir.run_directory import RunDir

SUMS = "SHA256SUMS"
_CHUNK = 8 << 20


def archive_name(run_dir: Path) -> str:
    absolute = str(run_dir.resolve())
    return f"{run_dir.name}-{hashlib.sha256(absolute.encode()).hexdigest()[:8]}.tar"


def _complete(run: RunDir) -> list[tuple[str, Path]]:
    """(name in the archive, folder) of every complete checkpoint of the run."""
    out = []
    for place in (run.checkpoints, run.kept):
        store = CheckpointStore(place)
        out += [
            (f"{place.name}/{e.name}", place / e.name) for e in store.entries() if e.has_manifest
        ]
    return out


def archive(run_dir: RunDir, to: Path, remove: bool, say: Callable[[str], None]) -> Path:
    """Pack the run's complete checkpoints into `to`/<run>-<hash>.tar; with `remove`, the
    packed folders go once the archive reads back intact. The archive's path."""
    folders = _complete(run_dir)
    if not folders:
        raise JzkError(
            f"no complete checkpoint in {run_dir} to archive. HINT: jzk ckpt list {run_dir}"
        )
    to.mkdir(parents=True, exist_ok=True)
    final = to / archive_name(run_dir.root)
    earlier = _replaceable(final, {name for name, _ in folders})
    part = final.with_name(final.name + ".part")
    sums: list[str] = []
    with (
        part.open("wb") as raw,
        tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for name, folder in folders:
            for path in sorted(p for p in folder.rglob("*") if p.is_file()):
                member = f"{name}/{path.relative_to(folder).as_posix()}"
                sums.append(f"{_sha256(path)}  {member}")
                tar.add(path, arcname=member, recursive=False)
        data = ("\n".join(sums) + "\n").encode()
        info = tarfile.TarInfo(SUMS)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        tar.close()
        raw.flush()
        os.fsync(raw.fileno())
    os.replace(part, final)
    _check_members(final)
    size = final.stat().st_size
    say(
        f"archived {len(folders)} checkpoint(s), {len(sums)} files, {size / 1e6:.1f} MB "
        f"into {final} (one file){earlier}"
    )
    if remove:
        # Said where the run is, before anything goes: a start of the run refuses to begin
        # again from step 0 (ckpt/store.py check_resume_early) until they are restored.
        names = [name for name, _ in folders]
        record = {"archive": str(final.resolve()), "folders": names}
        write_durably(run_dir.archived, (json.dumps(record) + "\n").encode())
        for _, folder in folders:
            shutil.rmtree(folder)
        say(f"removed the {len(folders)} archived folder(s) from {run_dir}")
    return final


def _replaceable(final: Path, names: set[str]) -> str:
    """An earlier archive of the run at the same place is replaced only when every
    checkpoint it holds is in the new one (what the run has not removed since); the words
    saying so, or '' when there is none."""
    if not final.exists():
        return ""
    with tarfile.open(final) as tar:  # the headers only
        held = {"/".join(n.split("/")[:2]) for n in tar.getnames() if n != SUMS}
    if missing := sorted(held - names):
        raise JzkError(
            f"{final} exists and holds {len(missing)} checkpoint(s) the run no longer has "
            f"({', '.join(missing[:3])}): this archive would lose them. HINT: --to another "
            f"folder, or bring them back first (jzk ckpt restore '{final}' RUN_DIR)"
        )
    return f", replacing the earlier archive there (its {len(held)} checkpoint(s) are in it)"


def restore(archive_path: Path, run: RunDir, say: Callable[[str], None]) -> list[str]:
    """Unpack an archive into `run_dir` and check it bit for bit; the steps restored."""
    if not archive_path.is_file():
        raise JzkError(
            f"no archive at {archive_path}. HINT: jzk ckpt archive RUN_DIR --to DIR makes one"
        )
    expected = _check_members(archive_path)
    run_dir = run.root
    if run.checkpoints.is_symlink():  # checkpoint.dir: its folder may have been purged
        Path(os.readlink(run.checkpoints)).mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive_path) as tar:
        members = [m for m in tar.getmembers() if m.name != SUMS]
        names = [m.name for m in members]
        tops = {n.split("/")[0] for n in names}
        if not tops <= {run.checkpoints.name, run.kept.name}:
            raise JzkError(f"{archive_path} holds {sorted(tops)}: not a checkpoint archive of jzk")
        for top in sorted(tops):
            # Into the folder itself (checkpoints/ may link to checkpoint.dir's: the
            # data filter refuses a path through a link), each name below it.
            dest = (run_dir / top).resolve()
            dest.mkdir(parents=True, exist_ok=True)
            inside = [
                m.replace(name=m.name.split("/", 1)[1], deep=False)
                for m in members
                if m.name.startswith(f"{top}/")
            ]
            tar.extractall(dest, members=inside, filter="data")
    differs = [n for n in names if _sha256(run_dir / n) != expected[n]]
    steps = sorted({"/".join(n.split("/")[:2]) for n in names})
    for step in steps:
        place, name = step.split("/")
        store = CheckpointStore(run_dir / place)
        problems = store.problems(int(name.removeprefix("step-")))
        differs += [f"{step}: {p}" for p in problems]
    if differs:
        raise JzkError(f"the restore of {archive_path} differs: {'; '.join(differs[:5])}")
    run.archived.unlink(missing_ok=True)  # back where they were: the run may start again
    say(f"restored {len(steps)} checkpoint(s) into {run}: every file matches its checksum")
    return steps


def _check_members(path: Path) -> dict[str, str]:
    """Every member's digest read back against SHA256SUMS; the digests by name."""
    with tarfile.open(path) as tar:
        member = tar.extractfile(SUMS) if SUMS in tar.getnames() else None
        if member is None:
            raise JzkError(
                f"{path} has no {SUMS}: not an archive of jzk ckpt archive, or cut short"
            )
        expected: dict[str, str] = {}
        for line in member.read().decode().splitlines():
            digest_text, name = line.split("  ", 1)
            expected[name] = digest_text
        for info in tar.getmembers():
            if info.name == SUMS:
                continue
            handle = tar.extractfile(info)
            assert handle is not None
            digest = hashlib.sha256()
            while block := handle.read(_CHUNK):
                digest.update(block)
            if expected.get(info.name) != digest.hexdigest():
                raise JzkError(f"{path}: {info.name} does not match {SUMS}: the archive is damaged")
    return expected


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()
