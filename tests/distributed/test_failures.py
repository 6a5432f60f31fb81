"""A failing worker stops the whole local run quickly, with its error shown."""

from __future__ import annotations

import time

import pytest


@pytest.mark.timeout(180)
def test_one_failing_worker_brings_the_others_down(train_run) -> None:
    start = time.monotonic()
    run = train_run(
        "fail",
        "resources.gpus_per_node=2",
        "train.steps=50",
        "data._target_=tests.helpers.FailOnRank",
        "+data.fail_rank=1",
        "preemption.max_restarts=0",  # this test is about the first failure
        check=False,
    )
    elapsed = time.monotonic() - start
    assert run.result.returncode == 1
    assert "injected failure on rank 1" in run.result.stderr
    assert "rank 1 failed" in run.result.stderr
    assert "the others were stopped" in run.result.stderr
    assert elapsed < 90, f"took {elapsed:.0f} s: the healthy worker was left waiting"


@pytest.mark.timeout(120)
def test_invalid_request_fails_before_any_worker_starts(train_run) -> None:
    run = train_run(
        "bad",
        "parallel=pipeline",
        "resources.gpus_per_node=3",
        "parallel.pipeline_stages=2",
        check=False,
    )
    assert run.result.returncode == 2
    assert (
        "parallel.pipeline_stages=2 but resources.nodes x resources.gpus_per_node = 3"
        in run.result.stderr
    )
    assert "Traceback" not in run.result.stderr


@pytest.mark.timeout(180)
def test_a_model_torch_compile_cannot_build_is_one_line_naming_the_key(tmp_path) -> None:
    """torch.compile's compiler broken for real (inductor's C++ compiler is /bin/false
    here): one line naming train.compile and the way out, exit 2, no restart."""
    import os
    import subprocess
    import sys

    from tests.distributed.conftest import REPO

    cmd = [
        sys.executable,
        str(REPO / "train.py"),
        "train.compile=true",
        "train.steps=4",
        "train.eval_every=0",
        "resources.gpus_per_node=2",
    ]
    env = {**os.environ, "CXX": "/bin/false"}
    run = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=150)
    assert run.returncode == 2, run.stderr[-3000:]
    errors = [line for line in run.stderr.splitlines() if "torch.compile failed" in line]
    assert len(errors) == 1, run.stderr[-3000:]
    assert "train.compile=true" in errors[0] and "HINT: train.compile=false" in errors[0]
    assert "Traceback" not in run.stderr and "restarting" not in run.stderr
