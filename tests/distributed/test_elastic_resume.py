"""A checkpoint saved on 4 ranks resumes on fewer ranks and on more (fsdp, pipeline_ddp).

Each run is `python train.py` in a subprocess, stopped by SIGUSR1 as Slurm would before a
requeue, then started again with another `resources.gpus_per_node`. The dataset records
every index it serves: across the three world sizes each sample position of the run is
trained on exactly once, in the uninterrupted run's order of global batches. The final
model is compared with an uninterrupted 4-rank run: not bitwise (the gradient sums run in
another order on another number of ranks), within the tolerance stated below.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import torch

from jeanzay_kit.runtime.sampler import GlobalBatchPlan
from tests.distributed.conftest import REPO
from tests.distributed.test_resume import last_step

STEPS = 32  # suite time: 40 before; still across two epoch boundaries
GLOBAL_BATCH = 32
DATA_SIZE = 512  # 25 held out, 487 to train on: 32 steps of 32 cross two epoch boundaries
BASE = (
    f"train.steps={STEPS}",
    f"train.global_batch_size={GLOBAL_BATCH}",
    "train.micro_batch_size=4",
    "train.log_every=1",
    "train.eval_every=0",
    "checkpoint.every_steps=10",
    "data._target_=tests.helpers.RecordingRegression",
    f"data.size={DATA_SIZE}",
)
# The GPUs of the three runs: saved on 4, resumed on fewer, then on more (pipeline_ddp
# with 2 stages needs 2 replicas at least, so it goes 4 -> 8 -> 4; fsdp 4 -> 2 -> 4, not
# 8: 8 ranks on the suite's 2 cores, and pipeline_ddp reshards to 8 already).
# ddp was folded into fsdp here (suite time, issue 34): which samples a rank reads comes
# from the same global-batch plan whatever the mode (runtime/sampler.py), and DDP's own
# world-size change is run on Slurm, 2 -> 4 ranks (tests/slurm/test_faults.py
# test_a_job_saved_on_one_node_resumes_on_two) and by a session (test_session.py).
MODES = {
    "fsdp": (("parallel=fsdp",), (4, 2, 4)),
    "pipeline_ddp": (("parallel=pipeline_ddp", "parallel.pipeline_stages=2"), (4, 8, 4)),
}
# Every stage of a pipeline reads the micro-batch (the first its inputs, the last its
# targets): each sample is served once per stage.
SERVED_PER_SAMPLE = {"fsdp": 1, "pipeline_ddp": 2}
# Measured on the 2-core VM (float32 on CPU, 40 AdamW steps, when STEPS was 40): the
# largest parameter difference from the uninterrupted run was 2.98e-08 for each mode (ddp, fsdp,
# pipeline_ddp); the bound leaves headroom for another CPU's summation order.
ATOL = 1e-5


def start(cwd: Path, record: Path, *overrides: str) -> subprocess.Popen:
    # From a directory of the user's: the default run directory (outputs/<name>-<hash>)
    # must be the same whatever resources.gpus_per_node is.
    record.mkdir(exist_ok=True)  # data.*_dir must exist (the data path check)
    return subprocess.Popen(
        [sys.executable, str(REPO / "train.py"), *BASE, f"+data.record_dir={record}", *overrides],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen) -> subprocess.CompletedProcess:
    out, err = proc.communicate(timeout=300)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def run_dir_of(cwd: Path, name: str) -> Path:
    found = sorted((cwd / "outputs").glob(f"{name}-*"))
    assert len(found) == 1, found
    return found[0]


def stop_at(proc: subprocess.Popen, run_dir: Path, step: int) -> subprocess.CompletedProcess:
    deadline = time.monotonic() + 300
    while proc.poll() is None and last_step(run_dir) < step and time.monotonic() < deadline:
        time.sleep(0.01)
    if proc.poll() is None:
        proc.send_signal(signal.SIGUSR1)
    return finish(proc)


def trained_indices(record: Path) -> Counter:
    """Every training sample index served (held-out ones, at the end, left out)."""
    train_size = DATA_SIZE - int(DATA_SIZE * 0.05)
    seen: Counter = Counter()
    for file in record.glob("*.txt"):
        for line in file.read_text().split("\n"):
            seen.update(i for i in map(int, line.split()) if i < train_size)
    return seen


def expected_indices() -> Counter:
    train_size = DATA_SIZE - int(DATA_SIZE * 0.05)
    plan = GlobalBatchPlan(train_size, GLOBAL_BATCH, GLOBAL_BATCH, 1, 0, seed=0)
    return Counter(plan.stream(0, STEPS * GLOBAL_BATCH).tolist())


def checked_indices(attempts: int) -> Counter:
    """What the start-of-run check reads: rank 0's first micro-batch (4 samples) of step 0."""
    train_size = DATA_SIZE - int(DATA_SIZE * 0.05)
    plan = GlobalBatchPlan(train_size, GLOBAL_BATCH, GLOBAL_BATCH, 1, 0, seed=0)
    return Counter({i: attempts for i in plan.stream(0, 4).tolist()})


@pytest.mark.timeout(900)
@pytest.mark.parametrize("mode", sorted(MODES))
def test_a_run_saved_on_4_ranks_resumes_on_another_number(tmp_path: Path, mode: str) -> None:
    overrides, (n1, n2, n3) = MODES[mode]
    straight = finish(
        start(
            tmp_path,
            tmp_path / "straight-record",
            *overrides,
            "job.name=straight",
            f"resources.gpus_per_node={n1}",
        )
    )
    assert straight.returncode == 0, straight.stderr[-3000:]

    record = tmp_path / "record"
    run = [*overrides, "job.name=elastic"]
    first = start(tmp_path, record, *run, f"resources.gpus_per_node={n1}")
    # The run directory appears with the first metrics line.
    deadline = time.monotonic() + 300
    while not list((tmp_path / "outputs").glob("elastic-*")) and time.monotonic() < deadline:
        time.sleep(0.05)
    run_dir = run_dir_of(tmp_path, "elastic")
    stopped = stop_at(first, run_dir, 10)
    assert stopped.returncode == 3, stopped.stderr[-3000:]
    at_first = last_step(run_dir)

    # Another number of GPUs after the requeue: same run directory, resumed, gradient
    # accumulation adapts.
    second = stop_at(start(tmp_path, record, *run, f"resources.gpus_per_node={n2}"), run_dir, 20)
    assert second.returncode == 3, second.stderr[-3000:]
    assert f"(step {at_first})" in second.stdout, second.stdout[-2000:]
    assert f"saved on {n1} rank(s)" in second.stdout and f"on {n2} rank(s)" in second.stdout
    at_second = last_step(run_dir)
    assert at_first < at_second < STEPS

    # And another: to the end.
    third = finish(start(tmp_path, record, *run, f"resources.gpus_per_node={n3}"))
    assert third.returncode == 0, third.stderr[-3000:]
    assert f"(step {at_second})" in third.stdout and f"on {n3} rank(s)" in third.stdout
    assert run_dir_of(tmp_path, "elastic") == run_dir

    # Every sample position of the STEPS steps once: none twice, none skipped. Besides, the
    # contract check at each start (train/check.py) reads the run's first micro-batch once.
    expected = Counter({i: n * SERVED_PER_SAMPLE[mode] for i, n in expected_indices().items()})
    assert trained_indices(record) == expected + checked_indices(attempts=3)
    assert trained_indices(tmp_path / "straight-record") == expected + checked_indices(1)

    a = torch.load(run_dir_of(tmp_path, "straight") / "model_final.pt", weights_only=True)
    b = torch.load(run_dir / "model_final.pt", weights_only=True)
    assert a.keys() == b.keys()
    worst = max(float((a[k].float() - b[k].float()).abs().max()) for k in a)
    print(f"{mode}: largest parameter difference from the uninterrupted run {worst:.3g}")
    assert worst < ATOL


@pytest.mark.timeout(300)
def test_a_different_pipeline_split_is_refused_before_any_worker(tmp_path: Path) -> None:
    record = tmp_path / "record"
    run = ("parallel=pipeline_ddp", "train.steps=10")
    first = finish(
        start(tmp_path, record, *run, "parallel.pipeline_stages=2", "resources.gpus_per_node=4")
    )
    assert first.returncode == 0, first.stderr[-3000:]
    run_dir = run_dir_of(tmp_path, "jzk")
    # The split is in the run directory's hash: name the directory to meet the checkpoint
    # (as resume=<path> or a user's own job.run_dir would).
    t0 = time.monotonic()
    refused = finish(
        start(
            tmp_path,
            record,
            *run,
            "parallel.pipeline_stages=4",
            "resources.gpus_per_node=8",
            f"job.run_dir={run_dir}",
            "checkpoint.allow_config_change=true",
        )
    )
    assert refused.returncode == 2
    assert "parallel.pipeline_stages: 2 -> 4" in refused.stderr, refused.stderr[-2000:]
    assert "jzk: rank" not in refused.stdout + refused.stderr  # no worker started
    assert time.monotonic() - t0 < 30
