"""A streaming dataset (torch's IterableDataset), trained and preempted as a user does.

The project is docs/examples/your_model with data=image_stream: userpkg.stream.ImageStream
reads its own share per rank and per loader worker and saves where it stands through
state_dict()/load_state_dict(); nothing in it imports jeanzay_kit. 600 images per epoch
on 2 ranks x 2 loader workers is 9 steps an epoch, so the runs below cross epochs before
and after the cut.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.distributed.test_resume import last_step
from tests.distributed.test_your_model import (
    finish,
    losses,
    project,  # noqa: F401 - the fixture
    run_dir_of,
    start,
    wait_for_step,
)

STEPS = 24
STREAM = (
    "data=image_stream",
    "data.size=600",
    f"train.steps={STEPS}",
    "train.global_batch_size=64",
    "train.micro_batch_size=16",
    "train.log_every=1",
    "train.eval_every=0",
    "checkpoint.every_steps=100",
    "loader.num_workers=2",
)


@pytest.mark.timeout(600)
def test_a_preempted_stream_resumes_exactly_and_refuses_another_world_size(
    project: Path,  # noqa: F811
) -> None:
    straight = finish(start(project, *STREAM, "job.name=straight", "resources.gpus_per_node=2"))
    assert straight.returncode == 0, straight.stderr[-3000:]
    assert "check: batch list(Tensor[16, 1, 8, 8] float32, Tensor[16] int64)" in straight.stdout
    seen = losses(run_dir_of(project, "straight"))
    assert seen[-1] < seen[0] - 0.1, seen  # it learns

    proc = start(project, *STREAM, "job.name=cut", "resources.gpus_per_node=2")
    run_dir = wait_for_step(proc, project, "cut", 11)
    os.killpg(proc.pid, signal.SIGUSR1)  # the launcher, its ranks and their loader workers
    stopped = finish(proc)
    assert stopped.returncode == 3, stopped.stderr[-3000:]
    saved = last_step(run_dir)
    assert 11 <= saved < STEPS
    # Each rank saved where it stands in its share of the stream.
    step_dir = run_dir / "checkpoints" / f"step-{saved}"
    assert sorted(p.name for p in step_dir.glob("data-*.pt")) == ["data-0.pt", "data-1.pt"]

    # On one rank the two shares cannot be merged: refused, naming why and what to do,
    # and not retried (exit 2).
    other = finish(start(project, *STREAM, "job.name=cut", "resources.gpus_per_node=1"))
    assert other.returncode == 2, other.stderr[-3000:]
    assert "saved by 2 data-parallel rank(s)" in other.stderr
    assert "loader.stream_resume=restart" in other.stderr

    resumed = finish(start(project, *STREAM, "job.name=cut", "resources.gpus_per_node=2"))
    assert resumed.returncode == 0, resumed.stderr[:3000]
    assert f"(step {saved})" in resumed.stdout
    assert (run_dir / "model_final.sha256").read_text() == (
        run_dir_of(project, "straight") / "model_final.sha256"
    ).read_text()


# A stream of the user's without state_dict(): it trains, but where it stood is unknown.
PLAIN_STREAM = """
import torch
from torch.utils.data import IterableDataset, get_worker_info


class PlainStream(IterableDataset):
    def __init__(self, size: int = 600):
        self.size = size

    def __iter__(self):
        info = get_worker_info()
        workers, me = (info.num_workers, info.id) if info else (1, 0)
        for number in range(me, self.size, workers):
            g = torch.Generator().manual_seed(number)
            label = int(torch.randint(0, 4, (), generator=g))
            yield torch.rand(1, 8, 8, generator=g), label
"""


@pytest.mark.timeout(300)
def test_a_stream_without_state_is_warned_then_refused_on_resume(
    project: Path,  # noqa: F811
) -> None:
    (project / "userpkg" / "plain_stream.py").write_text(PLAIN_STREAM)
    plain = (
        "data=custom",
        "data._target_=userpkg.plain_stream.PlainStream",
        "train.global_batch_size=64",
        "train.micro_batch_size=16",
        "train.eval_every=0",
        "loader.num_workers=2",
        "resources.gpus_per_node=2",
        "job.name=plain",
        "checkpoint.every_steps=4",
    )
    first = finish(start(project, *plain, "train.steps=4"))
    assert first.returncode == 0, first.stderr[-3000:]
    assert "without state_dict()/load_state_dict(): a resume from this run's" in first.stderr

    more = finish(start(project, *plain, "train.steps=8"))  # resumes from step 4
    assert more.returncode == 2, more.stderr[-3000:]
    assert "without state_dict()/load_state_dict()" in more.stderr
    assert "loader.stream_resume=replay" in more.stderr

    replayed = finish(start(project, *plain, "train.steps=8", "loader.stream_resume=replay"))
    assert replayed.returncode == 0, replayed.stderr[-3000:]
    assert "(step 4)" in replayed.stdout
