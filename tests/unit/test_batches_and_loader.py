"""Batches of any nesting, the loss forms, the loader over the global-batch plan, and the
loader/loss keys' validation (train/batch.py, train/loss.py, train/loader.py,
config/data_rules.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import traceback
from dataclasses import dataclass

import pytest
import torch
from torch.distributed.checkpoint.api import CheckpointException
from torch.utils.data import Dataset

from jeanzay_kit.ckpt.checkpointer import _interruption
from jeanzay_kit.config.collector import Collector
from jeanzay_kit.config.data_rules import check_loader, check_loader_cpus, check_loss
from jeanzay_kit.config.sections import LoaderSettings, LossSettings
from jeanzay_kit.errors import ContractError, PeerFailed, SpecError, is_loader_death
from jeanzay_kit.runtime.batch_sampler import PlanBatchSampler
from jeanzay_kit.runtime.sampler import GlobalBatchPlan
from jeanzay_kit.train.batch import concat, describe, split_batch, to_device
from jeanzay_kit.train.loader import (
    StepBatches,
    build_collate,
    build_loader,
    dead_worker,
    eval_workers,
    ignore_stop_signals,
)
from jeanzay_kit.train.loss import ComputeLoss, loss_in_output

CPU = torch.device("cpu")


@pytest.mark.parametrize(
    ("batch", "n_args", "kwargs", "has_target"),
    [
        ((torch.zeros(2, 3), torch.zeros(2)), 1, [], True),
        ([torch.zeros(2, 3), torch.zeros(2, 1), torch.zeros(2)], 2, [], True),
        (
            {"input_ids": torch.zeros(2, 4), "labels": torch.zeros(2)},
            0,
            ["input_ids", "labels"],
            False,
        ),
        (torch.zeros(2, 3), 1, [], False),
        ((torch.zeros(2, 3),), 1, [], False),
    ],
)
def test_split_batch(batch, n_args, kwargs, has_target) -> None:
    args, kw, target = split_batch(batch)
    assert len(args) == n_args and sorted(kw) == kwargs and (target is not None) == has_target


def test_a_dict_target_key_is_taken_out_of_the_model_inputs() -> None:
    batch = {"features": torch.ones(2, 3), "labels": torch.zeros(2)}
    args, kwargs, target = split_batch(batch, "labels")
    assert args == () and list(kwargs) == ["features"] and target is batch["labels"]


def test_to_device_moves_every_tensor_leaf_and_keeps_the_rest() -> None:
    @dataclass
    class Box:
        value: int

    batch = {"a": [torch.ones(1), "text", (torch.zeros(2), 3)], "b": Box(1)}
    moved = to_device(batch, CPU)
    assert moved["a"][1] == "text" and moved["a"][2][1] == 3 and moved["b"] == Box(1)
    assert isinstance(moved["a"][2], tuple) and torch.equal(moved["a"][0], torch.ones(1))


def test_concat_joins_micro_batches_leaf_by_leaf() -> None:
    parts = [(torch.full((2, 3), float(i)), {"y": torch.full((2,), float(i))}) for i in range(3)]
    joined = concat(parts)
    assert joined[0].shape == (6, 3) and joined[1]["y"].tolist() == [0, 0, 1, 1, 2, 2]


def test_describe_names_structure_shapes_and_dtypes() -> None:
    batch = [torch.zeros(4, 1, 8, 8), torch.zeros(4, dtype=torch.int64)]
    assert describe(batch) == "list(Tensor[4, 1, 8, 8] float32, Tensor[4] int64)"
    assert describe({"x": torch.zeros(2)}) == "dict(x: Tensor[2] float32)"


class _Linear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(3, 2)

    def forward(self, x, labels=None):
        out = self.layer(x)
        return {"logits": out, "loss": out.pow(2).mean()} if labels is not None else out

    @staticmethod
    def loss(output, target):
        return torch.nn.functional.cross_entropy(output, target)


@pytest.mark.parametrize(
    ("workers", "batches", "expected"),
    [
        (4, 1, 0),  # a tiny evaluation is read in the training process: no fork
        (4, 7, 1),
        (4, 8, 2),
        (4, 1000, 4),  # never more than loader.num_workers
        (0, 1000, 0),
    ],
)
def test_an_evaluation_forks_a_worker_only_for_batches_enough_to_pay_its_start(
    workers: int, batches: int, expected: int
) -> None:
    assert eval_workers(workers, batches) == expected


@pytest.mark.parametrize("form", ["criterion", "model"])
def test_criterion_and_model_forms_compute_the_same_loss(form: str) -> None:
    torch.manual_seed(0)
    model = _Linear()
    batch = (torch.randn(4, 3), torch.tensor([0, 1, 1, 0]))
    criterion = torch.nn.CrossEntropyLoss() if form == "criterion" else None
    compute = ComputeLoss(LossSettings(form, None, None), model, criterion)
    expected = torch.nn.functional.cross_entropy(model(batch[0]), batch[1])
    assert torch.equal(compute(model, batch), expected)


def test_the_output_form_reads_a_tensor_an_attribute_or_a_key() -> None:
    model = _Linear()
    batch = {"x": torch.randn(4, 3), "labels": torch.zeros(4)}
    compute = ComputeLoss(LossSettings("output", None, None), model)
    assert compute(model, batch).dim() == 0

    @dataclass
    class Out:
        loss: torch.Tensor

    assert loss_in_output(Out(torch.ones(()))).item() == 1.0
    with pytest.raises(ContractError, match="holds no loss"):
        loss_in_output((torch.ones(()),))


def test_the_loader_serves_the_plan_in_order_with_workers() -> None:
    """The batch sampler is the plan: with worker processes, the micro-batches arrive in
    the plan's order, and a loader started at step s serves what the plan says from s."""

    class Indices(Dataset):
        def __len__(self) -> int:
            return 100

        def __getitem__(self, index: int) -> torch.Tensor:
            return torch.tensor(index)

    plan = GlobalBatchPlan(
        100, 16, 4, dp_size=2, dp_rank=1, seed=3, start_step=5, start_position=80
    )
    settings = LoaderSettings(2, False, False, None, None)
    loader = build_loader(
        Indices(), PlanBatchSampler(plan, 5, 9), settings, workers=2, device_type="cpu", seed=0
    )
    batches = StepBatches(loader, plan.accumulation_steps, CPU, "test")
    for step in range(5, 9):
        got = [b.tolist() for b in batches.next_step()]
        assert got == [i.tolist() for i in plan.step_indices(step)]
    batches.close()


def test_a_dead_loader_worker_is_recognised_in_torch_words() -> None:
    assert is_loader_death(RuntimeError("DataLoader worker (pid(s) 123) exited unexpectedly"))
    assert is_loader_death(RuntimeError("DataLoader worker (pid 9) is killed by signal: Killed."))
    assert not is_loader_death(RuntimeError("CUDA out of memory"))


@pytest.mark.parametrize(
    ("rank", "expected"),
    [(1, RuntimeError), (0, PeerFailed)],
    ids=["the_dying_rank", "its_peer"],
)
def test_a_loader_death_inside_a_save_is_a_crash_not_a_write_failure(
    rank: int, expected: type
) -> None:
    # torch's SIGCHLD handler raised it inside dcp.save on rank 1; DCP handed it to all.
    death = RuntimeError("DataLoader worker (pid 11545) is killed by signal: Killed.")
    err = CheckpointException("save failed", {1: (death, traceback.extract_stack())})
    got = _interruption(err, rank)
    assert type(got) is expected
    if rank == 1:
        assert got is death
    disk_full = CheckpointException("save failed", {1: (OSError(28, "No space"), None)})
    assert _interruption(disk_full, rank) is None  # a write failure, said as such


class _Indices(Dataset):
    """index i -> i; index 13 fails the way a broken hand-over would, with live workers."""

    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> torch.Tensor:
        if index == 13:
            raise ConnectionResetError("the dataset's own error")
        return torch.tensor(index)


PLAN = GlobalBatchPlan(64, 4, 4, dp_size=1, dp_rank=0, seed=0)


def _two_worker_batches(first_step: int) -> StepBatches:
    plan = PLAN
    settings = LoaderSettings(2, False, False, None, None)
    loader = build_loader(
        _Indices(),
        PlanBatchSampler(plan, first_step, 16),
        settings,
        workers=1,
        device_type="cpu",
        seed=0,
    )
    return StepBatches(loader, 1, CPU, "data._target_=test._Indices")


def test_a_killed_worker_is_found_whatever_the_error_it_left() -> None:
    """A worker killed while it hands a batch over leaves a ConnectionResetError (seen in
    CI), not torch's 'DataLoader worker (pid ...)' error: the worker's exit names it."""
    batches = _two_worker_batches(0)
    batches.next_step()
    assert dead_worker(batches._it, grace_s=0) is None
    victim = batches._it._workers[0]
    # torch's SIGCHLD handler would raise its own error in this process first.
    handler = signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    try:
        os.kill(victim.pid, signal.SIGKILL)
        victim.join(5)
        found = dead_worker(batches._it)
        batches.close()
    finally:
        signal.signal(signal.SIGCHLD, handler)
    assert found == f"DataLoader worker (pid {victim.pid}) ended: killed by SIGKILL"


def test_an_error_of_the_dataset_with_live_workers_stays_its_own() -> None:
    failing = next(step for step in range(16) if 13 in PLAN.step_indices(step)[0].tolist())
    batches = _two_worker_batches(failing)
    with pytest.raises(ConnectionResetError, match="the dataset's own error"):
        batches.next_step()
    batches.close()


def test_loader_workers_ignore_the_preemption_signals() -> None:
    before = {s: signal.getsignal(s) for s in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM)}
    try:
        ignore_stop_signals(0)
        assert all(signal.getsignal(s) is signal.SIG_IGN for s in before)
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


# A local rank is started by multiprocessing's spawn, which makes spawn its default start
# method; it notes SIGUSR1 with a Python handler, builds the loader, and a SIGUSR1 reaches
# a worker the moment it exists (Slurm and `kill` signal the whole process tree).
SIGNAL_AT_WORKER_START = """
import multiprocessing, os, signal, sys
multiprocessing.set_start_method("spawn", force=True)
noted = []
signal.signal(signal.SIGUSR1, lambda signum, frame: noted.append(signum))
from jeanzay_kit.config.sections import LoaderSettings
from jeanzay_kit.train.loader import build_loader
steps = [[(i, i)] for i in range(4)]
settings = LoaderSettings(1, False, False, None, None)
loader = build_loader(list(range(4)), steps, settings, workers=1, device_type="cpu", seed=0)
batches = iter(loader)
for child in multiprocessing.active_children():
    os.kill(child.pid, signal.SIGUSR1)
print(sum(len(batch) for batch in batches))
"""


@pytest.mark.timeout(120)
def test_a_loader_worker_signalled_as_it_starts_lives_in_a_spawned_rank() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SIGNAL_AT_WORKER_START], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["4"]


def test_collate_fn_is_torchs_a_function_or_a_built_class() -> None:
    from torch.utils.data import default_collate

    assert build_collate(None) is default_collate
    assert build_collate({"_target_": "torch.utils.data.default_collate"}) is default_collate
    built = build_collate({"_target_": "torch.nn.Identity"})  # a class: built, then called
    assert isinstance(built, torch.nn.Identity)


@pytest.mark.parametrize(
    ("loader", "cpus", "workers", "problem", "note"),
    [
        ({"num_workers": "auto"}, 10, 9, None, False),
        ({"num_workers": "auto"}, 1, 0, None, False),
        ({"num_workers": 0}, 10, 0, None, False),
        ({"num_workers": 12}, 10, 12, None, True),
        ({"num_workers": 41}, 10, None, "loader.num_workers", False),
        ({"num_workers": -1}, 10, None, "loader.num_workers", False),
        ({"num_workers": 0, "persistent_workers": True}, 10, None, "persistent_workers", False),
        ({"collate_fn": "mypkg.collate"}, 10, None, "loader.collate_fn", False),
        ({"stream_resume": "replay"}, 10, 9, None, False),
        ({"stream_resume": "skip"}, 10, None, "loader.stream_resume=skip is not one of", False),
    ],
)
def test_loader_keys(loader, cpus, workers, problem, note) -> None:
    c = Collector()
    settings = check_loader(c, loader)
    notes: tuple[str, ...] = ()
    if settings is not None:
        settings, notes = check_loader_cpus(c, settings, cpus, "resources.cpus_per_task=10")
    if problem is None:
        c.raise_if_any()
        assert settings.num_workers == workers and bool(notes) == note
    else:
        with pytest.raises(SpecError, match=problem):
            c.raise_if_any()


@pytest.mark.parametrize(
    ("loss", "mode", "problem"),
    [
        ({"form": "model"}, "ddp", None),
        ({"form": "criterion", "criterion": {"_target_": "torch.nn.MSELoss"}}, "pipeline", None),
        ({"form": "criterion", "criterion": {"_target_": "???"}}, "ddp", "loss.criterion._target_"),
        ({"form": "output"}, "ddp", None),
        ({"form": "output"}, "pipeline_ddp", "cannot be used with parallel.mode=pipeline_ddp"),
        ({"form": "mean"}, "ddp", "loss.form"),
    ],
)
def test_loss_keys(loss, mode, problem) -> None:
    c = Collector()
    check_loss(c, loss, mode)
    if problem is None:
        c.raise_if_any()
    else:
        with pytest.raises(SpecError, match=problem):
            c.raise_if_any()


def test_auto_workers_leave_one_cpu_to_the_training_process() -> None:
    settings = LoaderSettings(None, None, False, None, None)
    assert [settings.workers_for(n) for n in (1, 2, 10)] == [0, 1, 9]
    assert settings.pin_for("cuda") and not settings.pin_for("cpu")
