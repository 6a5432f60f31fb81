"""Run `python train.py` as a user does, in a subprocess, and read what it leaves behind."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Run:
    run_dir: Path
    result: subprocess.CompletedProcess

    @property
    def state(self) -> dict[str, torch.Tensor]:
        return torch.load(self.run_dir / "model_final.pt", weights_only=True)

    @property
    def digest(self) -> str:
        return (self.run_dir / "model_final.sha256").read_text().strip()


@pytest.fixture
def train_run(tmp_path: Path):
    def run(name: str, *overrides: str, check: bool = True, timeout: float = 240) -> Run:
        run_dir = tmp_path / name
        cmd = [sys.executable, "train.py", *overrides, f"hydra.run.dir={run_dir}"]
        result = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout)
        if check and result.returncode != 0:
            pytest.fail(f"{' '.join(cmd)} exited {result.returncode}:\n{result.stderr[-4000:]}")
        return Run(run_dir, result)

    return run
