"""Is the run input-bound? Each logged window records how long the loop waited for its
batches (`data_wait_s`, `data_wait_share` in metrics.jsonl, `data N%` in the progress
line); a run that waits more than 10 % of its step time over three windows says so once."""

from __future__ import annotations

import json

import pytest

COMMON = ("train.steps=60", "train.log_every=10", "train.eval_every=0", "resources.gpus_per_node=1")


@pytest.mark.timeout(240)
def test_a_slow_dataset_is_called_input_bound_and_a_fast_one_is_not(train_run) -> None:
    # One batch a second against a step of milliseconds: waiting dominates even with both
    # cores busy elsewhere (another test beside it: at 10-50 ms a batch, steps slowed to
    # 170 ms by three busy processes left windows at a 0.11-0.3 share).
    slow = train_run(
        "slow",
        "train.steps=10",
        "train.global_batch_size=8",  # one micro-batch a step: 1 s a step, not 4 (suite time)
        "train.log_every=2",
        "train.eval_every=0",
        "resources.gpus_per_node=1",
        "data._target_=tests.helpers.SlowRegression",
        "+data.delay=1.0",
        "loader.num_workers=1",
    )
    notes = [ln for ln in slow.result.stdout.splitlines() if "input-bound" in ln]
    assert len(notes) == 1, slow.result.stdout[-3000:]
    assert "(loader.num_workers=" in notes[0] and "HINT: raise loader.num_workers" in notes[0]
    records = [json.loads(x) for x in (slow.run_dir / "metrics.jsonl").read_text().splitlines()]
    # Most windows wait: alone every one is at 0.98; in the whole suite a window whose
    # step a busy neighbour slowed (the next batch ready meanwhile) fell below 0.3 once.
    waited = [r["data_wait_share"] > 0.3 and r["data_wait_s"] > 0.005 for r in records[1:]]
    assert sum(waited) * 2 > len(waited), records
    assert "| data " in slow.result.stdout

    # Tensors sliced in the training process: no wait worth the name.
    fast = train_run("fast", *COMMON, "loader.num_workers=0")
    assert "input-bound" not in fast.result.stdout, fast.result.stdout[-2000:]
    records = [json.loads(x) for x in (fast.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert all(0 <= r["data_wait_share"] < 0.5 for r in records)
