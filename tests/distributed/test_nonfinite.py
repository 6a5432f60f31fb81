"""A NaN loss (one poisoned sample, real workers): train.nonfinite=stop ends the run
before the update with the last good checkpoint kept; skip drops that step and trains on."""

from __future__ import annotations

import json
import re

import pytest
import torch

RUN = (
    "resources.gpus_per_node=2",
    # 243 steps of 32 samples make an epoch: the poisoned sample is drawn at least once.
    "train.steps=250",
    "train.log_every=50",
    "train.eval_every=0",
    "checkpoint.every_steps=20",
    "data._target_=tests.helpers.PoisonedRegression",
    "+data.poison_index=5",
)


@pytest.mark.timeout(400)
def test_stop_then_skip(train_run) -> None:
    stopped = train_run("stop", *RUN, check=False)
    err = stopped.result.stderr
    assert stopped.result.returncode == 2, err[-3000:]
    found = re.search(r"the loss is NaN or infinite at step (\d+) \(train.nonfinite=stop\)", err)
    assert found, err[-3000:]
    bad_step = int(found.group(1))
    assert "restarting" not in err and "Traceback" not in err
    kept = sorted(
        int(p.name.split("-")[1]) for p in (stopped.run_dir / "checkpoints").glob("step-*")
    )
    assert kept and max(kept) < bad_step  # nothing saved after the bad step
    assert f"step-{max(kept)} is kept" in err
    # The run's record classifies the end (issue 58): a NaN, at that step.
    ending = json.loads((stopped.run_dir / "endings.jsonl").read_text().splitlines()[-1])
    assert ending["kind"] == "nan" and f"at step {bad_step}" in ending["evidence"], ending

    skipped = train_run("skip", *RUN, "train.nonfinite=skip")
    assert f"WARNING: non-finite loss at step {bad_step}: its update was skipped" in (
        skipped.result.stderr
    )
    assert "done: 250 steps" in skipped.result.stdout
    assert all(torch.isfinite(t).all() for t in skipped.state.values())
