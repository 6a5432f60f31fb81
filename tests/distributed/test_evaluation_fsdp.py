"""FSDP evaluates a held-out set the ranks cannot share evenly without hanging: 17 samples
on 2 ranks in micro-batches of 8 are 2 batches on rank 0 and 1 on rank 1, and each FSDP
forward all-gathers, so rank 1 makes one discarded call (runtime/sampler.py: eval_share)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.distributed.conftest import REPO


@pytest.mark.timeout(180)
def test_fsdp_evaluates_an_uneven_set_once_per_sample(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "train.py"),
            "parallel=fsdp",
            "resources.gpus_per_node=2",
            "data.size=340",  # train.eval_fraction=0.05 holds out 17
            "train.steps=10",
            "train.log_every=5",
            "eval.every_steps=5",
            "parallel.timeout_minutes=1",  # a hang fails in a minute, not ten
            f"job.run_dir={run_dir}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    evaluated = [(r["step"], r["eval_samples"]) for r in records if "eval_loss" in r]
    assert evaluated == [(5, 17), (10, 17)]
