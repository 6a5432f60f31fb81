"""Which samples each rank trains on, keyed by the global sample index. Pure (numpy only).

The run is one stream of sample indices: epoch e is a permutation of the dataset seeded
by (seed, e), and the epochs follow each other. Optimizer step s consumes stream
positions [s*G, (s+1)*G) with G the global batch. Inside a step, sample j of the global
batch belongs to accumulation micro-step j // (dp*m) and data-parallel rank
(j % (dp*m)) // m, m being the micro batch. So:

* the samples of a step do not depend on the world size: 1 process x 8 accumulation
  steps and 8 processes x 1 step see the same 8m samples;
* the position to resume from is one integer, the global sample index (step x G),
  valid mid-epoch and across a change of world size: a resumed run reads from the
  position its checkpoint recorded (start_step, start_position).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from jeanzay_kit.config.spec import JobSpec


@functools.lru_cache(maxsize=4)
def _epoch_order(seed: int, epoch: int, size: int) -> np.ndarray:
    """Epoch `epoch`'s permutation, drawn once: every micro-batch of the epoch reads it
    (a permutation of a million indices takes milliseconds). Read-only: it is shared."""
    order = np.random.default_rng([seed, epoch]).permutation(size)
    order.flags.writeable = False
    return order


@dataclass(frozen=True)
class GlobalBatchPlan:
    dataset_size: int
    global_batch: int
    micro_batch: int
    dp_size: int
    dp_rank: int
    seed: int
    # Where a resumed run starts: step `start_step` reads from global sample index
    # `start_position` (the checkpoint's), the following steps from there on.
    start_step: int = 0
    start_position: int = 0

    def __post_init__(self) -> None:
        if self.dataset_size <= 0:
            raise ValueError("the dataset is empty")
        if self.global_batch % (self.dp_size * self.micro_batch):
            raise ValueError(
                f"global batch {self.global_batch} is not divisible by data-parallel size "
                f"{self.dp_size} x micro batch {self.micro_batch}"
            )
        if not 0 <= self.dp_rank < self.dp_size:
            raise ValueError(f"dp_rank {self.dp_rank} outside [0, {self.dp_size})")

    @property
    def accumulation_steps(self) -> int:
        return self.global_batch // (self.dp_size * self.micro_batch)

    def epoch_order(self, epoch: int) -> np.ndarray:
        return _epoch_order(self.seed, epoch, self.dataset_size)

    def stream(self, start: int, count: int) -> np.ndarray:
        """Dataset indices at global sample positions [start, start + count)."""
        out = np.empty(count, dtype=np.int64)
        pos = start
        filled = 0
        while filled < count:
            epoch, offset = divmod(pos, self.dataset_size)
            take = min(count - filled, self.dataset_size - offset)
            out[filled : filled + take] = self.epoch_order(epoch)[offset : offset + take]
            filled += take
            pos += take
        return out

    def step_indices(self, step: int) -> list[np.ndarray]:
        """This rank's micro-batches for optimizer step `step`, in accumulation order."""
        batch = self.stream(self.sample_position(step), self.global_batch)
        per_round = self.dp_size * self.micro_batch
        return [
            batch[a * per_round + self.dp_rank * self.micro_batch :][: self.micro_batch]
            for a in range(self.accumulation_steps)
        ]

    def step_positions(self, step: int) -> list[np.ndarray]:
        """The global sample positions of `step_indices(step)`, micro-batch by micro-batch."""
        start, per_round = self.sample_position(step), self.dp_size * self.micro_batch
        first = start + self.dp_rank * self.micro_batch
        return [
            first + a * per_round + np.arange(self.micro_batch, dtype=np.int64)
            for a in range(self.accumulation_steps)
        ]

    def sample_position(self, step: int) -> int:
        """The global sample index where step `step` starts: what a checkpoint stores."""
        return self.start_position + (step - self.start_step) * self.global_batch


@dataclass(frozen=True)
class StreamPlan:
    """A streaming dataset's steps (train/stream.py): each data-parallel rank reads its own
    share of the stream, so there are no indices to plan, only the accumulation and the
    count of samples trained on, which a checkpoint records."""

    global_batch: int
    micro_batch: int
    dp_size: int
    start_step: int = 0
    start_position: int = 0

    @property
    def accumulation_steps(self) -> int:
        return self.global_batch // (self.dp_size * self.micro_batch)

    def sample_position(self, step: int) -> int:
        return self.start_position + (step - self.start_step) * self.global_batch


def held_out(spec: JobSpec, dataset_size: int) -> int:
    """Samples at the end of the dataset held out for evaluation (train.eval_fraction);
    none when the validation set is a dataset of its own (eval.data)."""
    if spec.eval.data:
        return 0
    return int(dataset_size * spec.train.eval_fraction)


def plan_for(
    spec: JobSpec, dp_rank: int, dataset_size: int, start_step: int = 0, start_position: int = 0
) -> GlobalBatchPlan:
    """The job's plan over the training part of a dataset of `dataset_size` samples, for
    data-parallel rank `dp_rank`, from a checkpoint's (step, global sample index)."""
    return GlobalBatchPlan(
        dataset_size=dataset_size - held_out(spec, dataset_size),
        global_batch=spec.train.global_batch_size,
        micro_batch=spec.train.micro_batch_size,
        dp_size=spec.layout.dp_size,
        dp_rank=dp_rank,
        seed=spec.train.seed,
        start_step=start_step,
        start_position=start_position,
    )


@dataclass(frozen=True)
class EvalShare:
    """One data-parallel rank's part of an evaluation over positions [0, count)."""

    batches: list[np.ndarray]  # positions in the eval set, micro-batch by micro-batch
    rounds: int  # forward calls every rank makes: the most any rank needs


def eval_share(count: int, dp_size: int, dp_rank: int, micro_batch: int) -> EvalShare:
    """Every `dp_size`-th position from `dp_rank`: each sample of the set on exactly one
    rank, the ranks' counts differing by at most one (no remainder dropped, none counted
    twice). A rank with fewer batches than `rounds` makes discarded calls so that sharded
    models (FSDP) meet their peers in the same collectives."""
    mine = np.arange(dp_rank, count, dp_size)
    batches = [mine[i : i + micro_batch] for i in range(0, len(mine), micro_batch)]
    return EvalShare(batches, math.ceil(math.ceil(count / dp_size) / micro_batch))
