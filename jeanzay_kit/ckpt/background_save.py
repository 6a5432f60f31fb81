"""The asynchronous half of a save (checkpoint.async=true): stage, write, commit, off the
training thread.

A staging thread copies the state into CPU memory (a device-to-host copy on GPU) while the
next step's forward and backward run; the loop calls `before_update()` before the
optimizer changes the weights, which waits for that copy if it is not done yet. Then a
writer thread waits for the files and runs the commit; the next save waits for all of it
(`wait()`), and an error there is raised on the training thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.staging import AsyncStager, DefaultStager, StagingOptions

from jeanzay_kit.ckpt.raw_storage import RawWriter
from jeanzay_kit.ckpt.staging import CpuCopyStager


class BackgroundSave:
    def __init__(self, device: torch.device) -> None:
        # An asynchronous save runs its collectives in a background thread; on the training
        # process group they would interleave with the training's own and deadlock.
        self.group = dist.new_group(backend="gloo")
        # One stager for the whole run: it keeps its CPU buffers (pinned on a GPU machine)
        # from one save to the next, so later saves copy into memory already mapped, and
        # copies on its own thread. The buffers are reused only after the previous save's
        # files are written: the next save waits for that first. On CPU, ckpt/staging.py
        # copies without holding the GIL (DCP's DefaultStager holds it, see there).
        self._stager: AsyncStager | None = (
            gpu_stager() if device.type == "cuda" else CpuCopyStager()
        )
        self._staging: Any = None  # the staging copy in flight (a Future)
        self._pending: threading.Thread | None = None  # writes + commit in flight
        self._error: BaseException | None = None
        self.blocked_s = 0.0  # how long before_update() waited for the last staging copy

    def start(
        self, state: dict[str, Any], writer: RawWriter, commit: Callable[[Any], None]
    ) -> None:
        """Stage and write `state` in the background, then call commit(process_group)."""
        if isinstance(self._stager, DefaultStager) and spent(self._stager):
            # torch 2.11's DefaultStager closes itself after each save (pytorch#183413):
            # reused, the next save fails deep in DCP (KeyError: <class 'type'>), as
            # bench/gpu_path.py met on an H200. A fresh one per save pins its buffers
            # again (about 0.3 s for 2 GB there); releases that keep it open reuse them.
            self._stager.close()
            self._stager = gpu_stager()
        response = dcp.async_save(
            state, storage_writer=writer, process_group=self.group, async_stager=self._stager
        )
        # With an async_stager torch returns an AsyncSaveResponse (a Future without one).
        assert not isinstance(response, Future)
        self._staging = response.staging_completion
        self._pending = threading.Thread(
            target=self._finish, args=(response.upload_completion, commit), daemon=True
        )
        self._pending.start()

    def _finish(self, upload: Any, commit: Callable[[Any], None]) -> None:
        try:
            upload.result()
            commit(self.group)
        except BaseException as err:  # noqa: BLE001 - re-raised by wait() on the main thread
            self._error = err

    def before_update(self) -> None:
        """Wait for the staging copy: the weights may change once it is done."""
        self.blocked_s = 0.0
        if self._staging is None:
            return
        t0 = time.perf_counter()
        try:
            self._staging.result()
        finally:
            self._staging = None
            self.blocked_s = time.perf_counter() - t0

    def wait(self) -> None:
        """Finish the save in flight (its writes and its commit); re-raise its error."""
        self.before_update()  # (the staging copy ends before the writes do)
        if self._pending is None:
            return
        self._pending.join()
        self._pending = None
        if self._error is not None:
            err, self._error = self._error, None
            raise err

    def close(self) -> None:
        """Free the staging buffers (after wait())."""
        if self._stager is not None:
            self._stager.close()
            self._stager = None


def gpu_stager() -> DefaultStager:
    """DCP's stager on a GPU: non-blocking copies into pinned host buffers, on a thread."""
    return DefaultStager(
        StagingOptions(
            use_pinned_memory=True,
            use_shared_memory=False,
            use_async_staging=True,
            use_non_blocking_copy=True,
        )
    )


def spent(stager: DefaultStager) -> bool:
    """True when the stager has closed its copier (torch 2.11 does it after each stage):
    its copy table is then empty. A torch without these attributes: not spent."""
    copier = getattr(stager, "_state_dict_stager", None)
    table = getattr(copier, "_deepcopy_dispatch", None)
    return isinstance(table, dict) and not table
