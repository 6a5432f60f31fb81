"""Test-only pieces that training processes import by `_target_` (they run from the repo root)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch
import torch.distributed as dist

from jeanzay_kit.examples.datasets import SyntheticRegression


class FailOnRank(SyntheticRegression):
    """A dataset whose construction fails on one rank only, to test failure handling."""

    def __init__(self, fail_rank: int, **kwargs):
        if dist.is_initialized() and dist.get_rank() == fail_rank:
            raise RuntimeError(f"injected failure on rank {fail_rank}")
        super().__init__(**kwargs)


class FailAfterBatches(SyntheticRegression):
    """Fails on one rank at its `after`-th micro-batch in this process: every attempt
    completes a few steps (progress), then crashes, however often it is restarted."""

    def __init__(self, fail_rank: int, after: int, **kwargs):
        super().__init__(**kwargs)
        self.fail_rank, self.after, self.calls = fail_rank, after, 0

    def __getitems__(self, indices):
        self.calls += 1
        if self.calls >= self.after and dist.is_initialized() and dist.get_rank() == self.fail_rank:
            raise RuntimeError(f"injected failure on rank {self.fail_rank} at batch {self.calls}")
        return super().__getitems__(indices)


class SlowRegression(SyntheticRegression):
    """Synthetic data that takes `delay` seconds per micro-batch: a run long enough to
    stop a worker in the middle of it. With delay_on_restart=False a requeued Slurm job
    (SLURM_RESTART_COUNT > 0) reads at full speed: the test waited only for the first
    attempt to be stopped, and the samples are the same either way."""

    def __init__(self, delay: float, delay_on_restart: bool = True, **kwargs):
        super().__init__(**kwargs)
        restarted = os.environ.get("SLURM_RESTART_COUNT", "0") not in ("", "0")
        self.delay = 0.0 if restarted and not delay_on_restart else delay

    def __getitems__(self, indices):
        if self.delay:
            time.sleep(self.delay)
        return super().__getitems__(indices)


class PoisonedRegression(SyntheticRegression):
    """Synthetic data in which one sample's inputs are NaN: the step that draws it has a
    non-finite loss (train.nonfinite)."""

    def __init__(self, poison_index: int, **kwargs):
        super().__init__(**kwargs)
        self.poison_index = poison_index

    def __getitem__(self, index):
        x, y = super().__getitem__(index)
        return (torch.full_like(x, float("nan")), y) if index == self.poison_index else (x, y)

    def __getitems__(self, indices):
        return [self[int(i)] for i in indices]


class CorruptRecord(SyntheticRegression):
    """Synthetic data with one record that cannot be read (issue 58): every attempt from
    the same checkpoint fails at the same step. Read sample by sample, as most datasets
    are (the toolkit names the index of the failing one)."""

    __getitems__ = None  # type: ignore[assignment]

    def __init__(self, bad_index: int, **kwargs):
        super().__init__(**kwargs)
        self.bad_index = bad_index

    def __getitem__(self, index):
        if index == self.bad_index:
            raise ValueError(f"corrupt record {index}")
        return super().__getitem__(index)


class FileBackedRegression(SyntheticRegression):
    """A user's dataset that reads a file named by `data.path` (the synthetic samples are
    scaled by the file's first number): an unreadable path must be refused at start."""

    def __init__(self, path: str, **kwargs):
        super().__init__(**kwargs)
        with open(path) as handle:
            scale = float(handle.read().split()[0])
        self.x = self.x * scale


class RecordingRegression(SyntheticRegression):
    """Synthetic data that appends the indices of every batch it serves to
    `<record_dir>/<pid>.txt`, one line per micro-batch: which samples a run trained on,
    across its restarts and world sizes."""

    def __init__(self, record_dir: str, **kwargs):
        super().__init__(**kwargs)
        self.record = Path(record_dir) / f"{os.getpid()}.txt"
        self.record.parent.mkdir(parents=True, exist_ok=True)

    def __getitems__(self, indices):
        # Opened by the process that reads (a loader worker has a pid of its own).
        record = self.record.parent / f"{os.getpid()}.txt"
        with record.open("a") as handle:
            handle.write(" ".join(str(int(i)) for i in indices) + "\n")
        return super().__getitems__(indices)


def bash_prints(word: str, env: dict[str, str]) -> str:
    """What bash makes of one rendered word: `printf %s WORD` with exactly `env`."""
    import subprocess

    return subprocess.run(
        ["bash", "-c", f"printf %s {word}"],
        capture_output=True,
        text=True,
        check=True,
        timeout=10,
        env=env,
    ).stdout


class NormedMLP(torch.nn.Module):
    """A user's model whose forward changes it in train mode (BatchNorm's running
    statistics) and draws random numbers (dropout): what the start-of-run check must give
    back untouched, since training then uses the same object (train/parts.py). Each
    construction is noted in $JZK_TEST_BUILDS when it is set (one line: this pid)."""

    def __init__(self, in_dim: int = 32, hidden: int = 64, out_dim: int = 8):
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Linear(in_dim, hidden),
            torch.nn.BatchNorm1d(hidden),
            torch.nn.Dropout(0.2),
            torch.nn.ReLU(),
            torch.nn.Linear(hidden, out_dim),
        )
        note = os.environ.get("JZK_TEST_BUILDS")
        if note:
            with open(note, "a") as out:
                out.write(f"model {os.getpid()}\n")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def write_files(root: Path, files: dict[str, str]) -> None:
    """A project as its files: {relative path: text}, folders made on the way."""
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
