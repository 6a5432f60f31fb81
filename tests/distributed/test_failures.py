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
