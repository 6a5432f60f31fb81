"""The session API in one process (no launcher: rank 0 of 1, gloo on an in-process store):
resume to the same weights with the user's extra state, the stop signal, a NaN, and the
refusals a user can meet. Multi-process runs: tests/distributed/test_session.py."""

from __future__ import annotations

import json
import math
import os
import signal
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from jeanzay_kit import session
from jeanzay_kit.ending.requeue import under_script_task
from jeanzay_kit.errors import JzkError
from jeanzay_kit.runtime import session_rules as rules

# Sessions install signal handlers (tests/conftest.py puts pytest's back).
pytestmark = pytest.mark.usefixtures("keep_signal_handlers")

DATA = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))


def train(
    run_dir: Path, steps: int, stop_at: int | None = None, lr: float = 0.1, save_on_stop=True
) -> dict:
    """A user's loop: returns the final weights and what `extra` held."""
    torch.manual_seed(0)
    with session(steps=steps, run_dir=run_dir, env={}, stall_seconds=0) as s:
        model = s.wrap(nn.Linear(4, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
        extra = {"scheduler": scheduler, "seen": 0}
        sampler = s.sampler(DATA, batch_size=4, global_batch_size=8, seed=3)
        ckpt = s.checkpointer(model, optimizer, extra=extra, config={"lr": lr})
        start = ckpt.resume()
        batches = iter(DataLoader(DATA, batch_sampler=sampler))
        for step in range(start, steps):
            optimizer.zero_grad()
            for _ in range(sampler.accumulation_steps):
                x, y = next(batches)
                loss = nn.functional.mse_loss(model(x), y)
                loss.backward()
                extra["seen"] += len(x)
            optimizer.step()
            scheduler.step()
            if step + 1 == stop_at:
                os.kill(os.getpid(), signal.SIGUSR1)  # as Slurm's time-limit warning
            s.log(step + 1, loss=loss)
            if s.should_stop(step, loss=loss):
                if save_on_stop:
                    ckpt.save(step + 1)
                s.requeue_and_exit()
        ckpt.save(steps)
        return {
            "weights": {k: v.clone() for k, v in model.state_dict().items()},
            "seen": extra["seen"],
            "lr": scheduler.get_last_lr()[0],
            "start": start,
        }


def test_a_stopped_session_resumes_to_the_same_weights_and_extra_state(tmp_path: Path) -> None:
    straight = train(tmp_path / "straight", 10)
    with pytest.raises(SystemExit) as stopped:
        train(tmp_path / "cut", 10, stop_at=4)
    assert stopped.value.code == 3
    resumed = train(tmp_path / "cut", 10)
    assert resumed["start"] == 5  # the ranks agree while the next step computes
    for key, value in straight["weights"].items():
        assert torch.equal(value, resumed["weights"][key]), key
    assert resumed["seen"] == straight["seen"] == 10 * 8  # a plain value, restored
    assert resumed["lr"] == straight["lr"]  # the scheduler, through its state_dict
    lines = (tmp_path / "cut" / "metrics.jsonl").read_text().splitlines()
    # The records up to the checkpoint kept, the rest logged again: each step once.
    assert [json.loads(line)["step"] for line in lines] == list(range(1, 11))


@pytest.mark.parametrize("save_on_stop", [True, False])
def test_a_loop_that_stops_without_saving_where_it_stopped_is_told(
    tmp_path: Path, capsys, save_on_stop: bool
) -> None:
    train(tmp_path, 4)  # step-4
    with pytest.raises(SystemExit) as stopped:
        train(tmp_path, 10, stop_at=6, save_on_stop=save_on_stop)
    assert stopped.value.code == 3
    warned = (
        "session: warning: stopped after step 7 without saving it: its newest checkpoint "
        "is step-4, and the steps since are trained again. HINT: save where it stops"
    )
    assert (warned in capsys.readouterr().err) is not save_on_stop


def test_a_resume_with_other_hyper_parameters_is_refused_naming_them(
    tmp_path: Path, capsys
) -> None:
    train(tmp_path, 4)
    with pytest.raises(SystemExit) as refused:
        train(tmp_path, 8, lr=0.5)
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert "session: error:" in err and "user.lr" in err and "HINT" in err


def test_a_nan_loss_stops_every_rank_without_a_save(tmp_path: Path, capsys) -> None:
    run = session(steps=3, run_dir=tmp_path, env={}, stall_seconds=0)
    with pytest.raises(SystemExit) as stopped, run as s:
        s.should_stop(0, loss=torch.tensor(1.0))
        s.should_stop(1, loss=torch.tensor(float("nan")))
    assert stopped.value.code == 2
    assert "the loss is NaN or infinite at step 2" in capsys.readouterr().err


def test_extra_state_that_cannot_be_loaded_safely_is_named(tmp_path: Path, capsys) -> None:
    class Opaque:
        pass

    with pytest.raises(SystemExit), session(run_dir=tmp_path, env={}, stall_seconds=0) as s:
        model = s.wrap(nn.Linear(2, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        ckpt = s.checkpointer(model, opt, extra={"mine": {"thing": Opaque()}})
        ckpt.resume()
        ckpt.save(1)
    err = capsys.readouterr().err
    assert "extra['mine']['thing'] is a" in err and "Opaque" in err and "HINT" in err
    assert not (tmp_path / "checkpoints" / "step-1").exists()


def test_reading_the_loader_before_resume_is_refused(tmp_path: Path, capsys) -> None:
    run = session(steps=4, run_dir=tmp_path, env={}, stall_seconds=0)
    with pytest.raises(SystemExit), run as s:
        model = s.wrap(nn.Linear(4, 1))
        sampler = s.sampler(DATA, batch_size=4)
        s.checkpointer(model, torch.optim.SGD(model.parameters(), lr=0.1))
        next(iter(DataLoader(DATA, batch_sampler=sampler)))
    assert "started before ckpt.resume()" in capsys.readouterr().err


def test_a_step_logged_as_a_float_or_a_numpy_int_is_kept_as_a_whole_number(
    tmp_path: Path, capsys
) -> None:
    with (
        pytest.raises(SystemExit) as refused,
        session(steps=3, run_dir=tmp_path, env={}, stall_seconds=0) as s,
    ):
        s.log(1.0, loss=0.5)
        s.log(np.int64(2), loss=torch.tensor(0.25))
        s.log(2.5, loss=0.1)  # not a number of steps: refused, nothing written
    steps = [json.loads(x)["step"] for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2] and all(type(step) is int for step in steps)
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert "s.log(step=2.5): the step is the number of optimizer steps done" in err, err


@pytest.mark.parametrize(
    ("step", "expected"),
    [
        (3, 3),
        (3.0, 3),
        (np.int64(3), 3),
        (np.float64(3.0), 3),
        (torch.tensor(3), 3),
        (torch.tensor(3.0), 3),
        (10**400, 10**400),
    ],
)
def test_a_whole_step_is_read_from_any_number_type(step: object, expected: int) -> None:
    assert rules.whole_step(step) == expected


@pytest.mark.parametrize(
    "step", [2.5, "3", None, True, math.nan, math.inf, Fraction(10**400, 3), torch.tensor([1, 2])]
)
def test_a_step_that_is_no_whole_number_is_refused(step: object) -> None:
    with pytest.raises(JzkError, match="s.log"):
        rules.whole_step(step)


@pytest.mark.parametrize(
    ("batch", "global_batch", "world", "accumulation"),
    [(4, None, 2, 1), (4, 8, 2, 1), (4, 32, 2, 4), (8, 8, 1, 1)],
)
def test_global_batch_splits_into_accumulation(batch, global_batch, world, accumulation) -> None:
    assert rules.split_global_batch(batch, global_batch, world) == accumulation


@pytest.mark.parametrize(("batch", "global_batch", "world"), [(4, 12, 2), (0, None, 1), (4, 0, 1)])
def test_a_global_batch_that_does_not_split_is_refused(batch, global_batch, world) -> None:
    with pytest.raises(JzkError, match="s.sampler"):
        rules.split_global_batch(batch, global_batch, world)


@pytest.mark.parametrize(
    ("given", "env", "hydra_dir", "expected"),
    [
        ("mine", {"JZK_RUN_DIR": "/runs/a"}, "/multirun/0", "mine"),
        (None, {"JZK_RUN_DIR": "/runs/a"}, "/multirun/0", "/runs/a"),
        (None, {}, "/multirun/0", "/multirun/0"),  # inside a @hydra.main function
        (None, {}, None, rules.DEFAULT_RUN_DIR),
    ],
)
def test_where_a_session_writes(given, env, hydra_dir, expected) -> None:
    assert rules.run_dir_for(given, env, hydra_dir) == expected
    assert under_script_task(env) == bool(env)


@pytest.mark.parametrize(
    ("value", "problems"),
    [
        ({"a": 1, "b": [1.0, "x", None], "c": {"d": True}}, []),
        ({"a": object()}, ["extra['a'] is a builtins.object"]),
        ({"a": [1, {2: set()}]}, ["extra['a'][1][2] is a builtins.set"]),
        ({(1, 2): 3}, ["extra has a key of type tuple"]),
    ],
)
def test_what_extra_state_can_hold(value, problems) -> None:
    assert rules.extra_problems(value, "extra") == problems


def train_fsdp(run_dir: Path, steps: int, stop_at: int | None = None) -> str:
    torch.manual_seed(0)
    with session(steps=steps, run_dir=run_dir, env={}, stall_seconds=0) as s:
        model = s.wrap(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1)), fsdp=True)
        optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)  # after wrapping
        sampler = s.sampler(DATA, batch_size=8)
        ckpt = s.checkpointer(model, optimizer)
        batches = iter(DataLoader(DATA, batch_sampler=sampler))
        for step in range(ckpt.resume(), steps):
            x, y = next(batches)
            loss = nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if step + 1 == stop_at:
                os.kill(os.getpid(), signal.SIGUSR1)
            if s.should_stop(step, loss=loss):
                ckpt.save(step + 1)
                s.requeue_and_exit()
        return s.save_model(model)


def test_an_fsdp_session_resumes_to_the_same_weights(tmp_path: Path) -> None:
    """s.wrap(fsdp=True): FSDP2's sharded parameters and optimizer state go through the
    same checkpoints (one rank here; tests/distributed runs DDP on several)."""
    straight = train_fsdp(tmp_path / "straight", 8)
    with pytest.raises(SystemExit):
        train_fsdp(tmp_path / "cut", 8, stop_at=3)
    assert train_fsdp(tmp_path / "cut", 8) == straight
    saved = torch.load(tmp_path / "cut" / "model_final.pt", weights_only=True)
    assert sorted(saved) == ["0.bias", "0.weight", "2.bias", "2.weight"]  # whole tensors
    manifest = (tmp_path / "cut" / "checkpoints" / "step-4" / "manifest.json").read_text()
    assert '"mode": "fsdp"' in manifest


def test_nccl_on_the_cpu_is_refused_naming_the_option(tmp_path: Path, capsys) -> None:
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: NCCL is allowed")
    with pytest.raises(SystemExit) as refused:
        session(run_dir=tmp_path, env={}, backend="nccl").__enter__()
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert "session(backend)=nccl but this rank trains on the CPU" in err and "HINT" in err


class Augmented(torch.utils.data.Dataset):
    """A dataset that draws a random number per sample, as a random crop would."""

    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.tensor([float(index), torch.rand(()).item()])


def _read(run_dir: Path, steps: int, stop_after: int | None = None) -> list[torch.Tensor]:
    seen = []
    with session(steps=steps, run_dir=run_dir, env={}, stall_seconds=0) as s:
        model = s.wrap(nn.Linear(2, 1))
        sampler = s.sampler(Augmented(), batch_size=4, seed=5, seed_per_sample=True)
        ckpt = s.checkpointer(model, torch.optim.SGD(model.parameters(), lr=0.1))
        start = ckpt.resume()
        for step, batch in zip(
            range(start, steps), DataLoader(sampler.dataset, batch_sampler=sampler), strict=True
        ):
            seen.append(batch)
            if step + 1 == stop_after:
                ckpt.save(step + 1)
                return seen
    return seen


def test_a_sessions_samples_draw_the_same_numbers_after_a_resume(tmp_path: Path) -> None:
    """seed_per_sample: the toolkit's own per-sample seeding (runtime/seeded_samples.py)
    through the same batch sampler its loop uses."""
    straight = _read(tmp_path / "straight", 6)
    first = _read(tmp_path / "cut", 6, stop_after=3)
    rest = _read(tmp_path / "cut", 6)
    assert len(rest) == 3
    for a, b in zip(straight, first + rest, strict=True):
        assert torch.equal(a, b)
    assert len({round(float(x), 6) for batch in straight for x in batch[:, 1]}) > 20
