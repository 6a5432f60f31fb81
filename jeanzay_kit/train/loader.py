"""torch's DataLoader over the toolkit's global-batch plan.

The plan (runtime/sampler.py) decides which samples each rank reads at each step, keyed by
the global sample index; it is given to torch's `DataLoader` as its `batch_sampler`, so
worker processes, pinned memory, prefetching, a dataset's `__getitems__` and any collate
function work as torch documents them, while resuming mid-epoch or on another number of
GPUs stays sample-exact: a resumed run builds a new loader whose sampler starts at the
checkpoint's step. There is no loader state to save.

Loader workers and signals: Slurm signals every process of a job step, the loader's
workers too. A worker ignores the preemption signals (the training process notes them
and saves at the next step boundary, then shuts the workers down); with the default
action a worker would die of SIGUSR1 and take the step, and the save, with it. Workers are
forked where the platform can (Linux), as torch does by default and as a rank started by
srun does: a forked worker inherits the training process's handler, so a signal that
arrives before its worker_init_fn runs is only noted. A local rank is itself started by
multiprocessing's spawn, which makes spawn its default too: its workers would start as new
interpreters with the default action, for the seconds they take to import torch (seen in
CI: a SIGUSR1 to the process tree during an evaluation's worker start-up killed them).
"""

from __future__ import annotations

import math
import multiprocessing
import signal
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from torch.utils.data import DataLoader, Sampler, default_collate

from jeanzay_kit.config.sections import LoaderSettings
from jeanzay_kit.config.spec import JobSpec
from jeanzay_kit.ending.codes import SLURM_NAMES, stop_signals
from jeanzay_kit.errors import LoaderWorkerDied, is_loader_death
from jeanzay_kit.runtime.seeded_samples import IndexedSamples, SeededSamples
from jeanzay_kit.train.batch import to_device


def ignore_stop_signals(_worker_id: int) -> None:
    """worker_init_fn: the training process handles preemption, not its loader workers."""
    for sig in stop_signals(SLURM_NAMES):
        signal.signal(sig, signal.SIG_IGN)


def worker_context() -> Any:
    """The start method of loader workers: fork where the platform has it (see above),
    else the platform's default (None)."""
    if "fork" in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("fork")
    return None


def build_collate(node: Mapping[str, Any] | None) -> Callable[[list[Any]], Any]:
    """loader.collate_fn: torch's default_collate, a function, or a class built from the
    node (e.g. a padding collator with its tokenizer)."""
    if node is None:
        return default_collate
    from hydra.utils import get_object, instantiate

    target = get_object(node["_target_"])
    if isinstance(target, type) or len(node) > 1:
        return instantiate(node)
    return target


def build_loader(
    dataset: Any,
    sampler: Sampler[list[tuple[int, int]]] | list[list[tuple[int, int]]],
    settings: LoaderSettings,
    *,
    workers: int,
    device_type: str,
    seed: int,
    per_step: int = 1,
    seeded: bool = True,
) -> DataLoader:
    """The user's dataset read by the sampler's (index, position) keys, each sample's
    random numbers seeded from (seed, position) unless `seeded` is false. per_step:
    micro-batches one optimizer step takes at once (its accumulation)."""
    extra: dict[str, Any] = {}
    if workers > 0:
        extra["worker_init_fn"] = ignore_stop_signals
        extra["multiprocessing_context"] = worker_context()
        extra["persistent_workers"] = settings.persistent_workers
        extra["prefetch_factor"] = prefetch_for(settings.prefetch_factor, workers, per_step)
    return DataLoader(
        SeededSamples(dataset, seed) if seeded else IndexedSamples(dataset),
        batch_sampler=sampler,
        num_workers=workers,
        collate_fn=build_collate(settings.collate_fn),
        pin_memory=settings.pin_for(device_type),
        # Worker seeds come from this generator, not from the global RNG, which stays
        # exactly where model initialisation left it (dropout draws from it). A sample's
        # own random numbers do not depend on them (SeededSamples).
        generator=torch.Generator().manual_seed(seed),
        **extra,
    )


def workers_here(settings: LoaderSettings) -> int:
    """loader.num_workers in this training process: auto, where validation could not
    resolve it (cluster=local), from the CPUs this process was given."""
    return settings.workers_for(max(1, torch.get_num_threads()))


# Batches a loader worker must have to read in an evaluation for its start to pay.
EVAL_BATCHES_PER_WORKER = 4


def eval_workers(workers: int, batches: int) -> int:
    """loader.num_workers for an evaluation of `batches` batches on this rank: a worker
    is forked from the training process at each evaluation and pays its start before its
    first batch, so a few batches are read here instead. That is also a fork of a busy
    process fewer: on CPython before 3.11.10 such a fork's child can hang for ever when
    another thread creates its interpreter state at that moment (CPython gh-112275), which
    hung an evaluation's worker twice in this project's test suite."""
    return min(workers, batches // EVAL_BATCHES_PER_WORKER)


def prefetch_for(setting: int | None, workers: int, per_step: int) -> int:
    """loader.prefetch_factor, or by default enough batches in flight for a whole step:
    a step takes its `per_step` micro-batches at once, and with torch's 2 per worker the
    workers would idle while the step computes, then make it wait (measured in
    bench/bench_loader.py)."""
    if setting is not None:
        return setting
    return max(2, math.ceil(per_step / workers))


def fetch(loader: DataLoader, batch_keys: list[tuple[int, int]]) -> Any:
    """One batch of `build_loader`'s dataset in this process, as a loader without workers
    would build it."""
    dataset: Any = loader.dataset  # SeededSamples (runtime/seeded_samples.py)
    return loader.collate_fn(dataset.__getitems__(batch_keys))


def describe_loader(spec: JobSpec, workers: int | None) -> str:
    """What the data is read with, as error and notes name it."""
    cpus = spec.loader.cpus_per_process
    per = f", {cpus} CPU(s) per process" if cpus else ""
    return f"data._target_={spec.data.get('_target_')} (loader.num_workers={workers}{per})"


def stop_workers(iterator: Any) -> None:
    """Stop a loader iterator's worker processes now, not whenever it is collected."""
    shutdown = getattr(iterator, "_shutdown_workers", None)
    if shutdown is not None:
        shutdown()


def dead_worker(iterator: Any, grace_s: float = 1.0) -> str | None:
    """How one of the iterator's worker processes ended, if one has: a worker killed while
    it hands a batch over surfaces in the training process as whatever the hand-over
    raised (a ConnectionResetError from the shared-memory file descriptor it was
    sending, an EOFError), not as torch's "DataLoader worker (pid ...)" error. The kernel
    closes the worker's sockets as it exits, so its exit status may trail the error by a
    moment: look again for up to `grace_s`."""
    workers = getattr(iterator, "_workers", None) or []  # torch's multi-process iterator
    deadline = time.monotonic() + grace_s
    while True:
        for worker in workers:
            code = worker.exitcode
            if code is not None and code != 0:
                how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit {code}"
                return f"DataLoader worker (pid {worker.pid}) ended: {how}"
        if time.monotonic() >= deadline or not workers:
            return None
        time.sleep(0.05)


def loader_death(err: BaseException | str, where: str) -> LoaderWorkerDied:
    return LoaderWorkerDied(
        f"a DataLoader worker of {where} died: {str(err).strip().splitlines()[0]}. "
        "HINT: a worker killed by the kernel is usually out of memory (lower "
        "loader.num_workers or loader.prefetch_factor, or ask for more memory); "
        "loader.num_workers=0 loads in the training process and shows the dataset's "
        "own error"
    )


class StepBatches:
    """The loader's micro-batches, `grad_accum` per optimizer step, on the device."""

    def __init__(
        self,
        loader: DataLoader,
        grad_accum: int,
        device: torch.device,
        describe: str,
    ):
        self.loader, self.grad_accum, self.device = loader, grad_accum, device
        self.non_blocking = bool(loader.pin_memory)
        self.describe = describe  # describe_loader(...)
        self._it: Iterator[Any] | None = None

    def next_step(self) -> list[Any]:
        if self._it is None:
            self._it = iter(self.loader)
        try:
            return [
                to_device(self._next(), self.device, self.non_blocking)
                for _ in range(self.grad_accum)
            ]
        except Exception as err:
            if is_loader_death(err):
                raise loader_death(err, self.describe) from err
            ended = dead_worker(self._it) if not isinstance(err, StopIteration) else None
            if ended is None:
                raise
            raise loader_death(ended, self.describe) from err

    def _next(self) -> Any:
        """The next micro-batch (the plan's sampler ends exactly at train.steps)."""
        assert self._it is not None
        return next(self._it)

    def close(self) -> None:
        stop_workers(self._it)
        self._it = None


def sample_batch(collate_fn: Mapping[str, Any] | None, dataset: Any, size: int) -> Any:
    """`size` samples of the dataset (its first ones, again from the start if it is
    smaller), collated as the loader collates them: what the micro-batch search and the
    memory estimate (train/fit_estimate.py) run a step on."""
    from itertools import cycle, islice

    if hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__"):
        samples = [dataset[i % len(dataset)] for i in range(size)]
    else:  # a stream: its first samples
        samples = list(islice(cycle(iter(dataset)), size))
    return build_collate(collate_fn)(samples)
