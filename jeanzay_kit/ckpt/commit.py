"""Sealing a checkpoint: every rank's checksums to rank 0, which commits the folder
(rename, manifest last) and applies retention; dropped checkpoints are deleted off the
training thread. Collective: every rank calls `commit_checkpoint` for the same step."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from jeanzay_kit.ckpt.layout import FileRecord
from jeanzay_kit.ckpt.store import CheckpointStore


class TrashEmptier:
    """Deletes what retention dropped (moved to trash by rank 0) on a background thread."""

    def __init__(self, store: CheckpointStore) -> None:
        self.store = store
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self.join()
        self._thread = threading.Thread(target=self.store.empty_trash, daemon=True)
        self._thread.start()

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None


def any_rank_failed(failed: bool, group: Any, device: torch.device) -> bool:
    """Collective: True on every rank when any rank failed, so all ranks take the same
    path after a write error instead of some waiting in a collective for the others."""
    flag = torch.tensor([1.0 if failed else 0.0], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=group)
    return bool(flag.item())


def commit_checkpoint(
    store: CheckpointStore,
    step: int,
    rank: int,
    *,
    fields: dict[str, Any],
    records: dict[str, FileRecord],
    dcp_records: dict[str, FileRecord],
    group: Any,
    keep_last: int,
    trash: TrashEmptier,
    log: Callable[[str], None],
    device: torch.device,
    keep_best: tuple[str, str] | None = None,
) -> None:
    """Gather every rank's file records; rank 0 seals step-N and applies retention.

    records: this rank's own files by name; dcp_records: DCP's files by path under the
    temporary folder."""
    tmp = store.tmp_dir(step)
    mine = dict(records)
    for path, record in dcp_records.items():
        mine[str(Path(path).relative_to(tmp))] = record
    gathered: list[dict | None] = [None] * dist.get_world_size(group) if rank == 0 else []
    # The gather also waits until every rank's files are written and fsynced.
    dist.gather_object(
        mine,
        gathered if rank == 0 else None,
        dst=dist.get_global_rank(group, 0) if group is not None else 0,
        group=group,
    )
    failure: OSError | None = None
    if rank == 0:
        known: dict[str, FileRecord] = {}
        for part in gathered:
            known.update(part or {})
        try:
            manifest = store.commit(step, fields, known=known)
            removed = store.apply_retention(
                keep_last, newest_good=step, delete=False, keep_best=keep_best
            )
        except OSError as err:  # the manifest or the rename met a full disk
            failure = err
        else:
            if removed:
                trash.start()
            note = f", removed {', '.join(removed)}" if removed else ""
            log(f"checkpoint step-{step} saved ({manifest.total_bytes / 1e6:.1f} MB){note}")
    # Nobody goes on (or exits) before the checkpoint is sealed, or known to be lost.
    if any_rank_failed(failure is not None, group, device):
        # The other ranks learn only that rank 0 failed; rank 0's message has the cause.
        raise failure or OSError("rank 0 could not seal the checkpoint")
