"""train.micro_batch_size=auto: before training, rank 0 finds the largest micro-batch that
fits its GPU, every rank takes it, and the run records it so a resume uses the same one.

The search (config/micro_batch_rules.py) doubles, then bisects, over the sizes that keep
the global batch exact. One trial is a real forward and backward of the user's model on
that many samples of the user's dataset, with the run's precision and activation
checkpointing, while a ballast tensor holds the memory the optimizer's state and DDP's
gradient buckets will take; an out-of-memory error is caught and the memory given back.
The trial runs eager: a compiled model fuses kernels and keeps fewer activations, so what
fits eager fits compiled. The model's weights are never updated and the random number
generators are put back, so the run trains as a run configured with that size would.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import torch
from torch import nn

from jeanzay_kit.config import fit_rules
from jeanzay_kit.config.micro_batch_rules import (
    CPU_FALLBACK,
    auto_options,
    explain,
    largest_at_most,
    largest_fitting,
)
from jeanzay_kit.config.spec import JobSpec
from jeanzay_kit.durable_io import write_durably
from jeanzay_kit.errors import JzkError
from jeanzay_kit.rundir.run_directory import RunDir
from jeanzay_kit.train.batch import to_device

# The recorded choice, in the run directory.
# Peak memory a trial may reach, as a share of the GPU's: the rest is for the allocator's
# fragmentation over a long run and for what one step does that a trial does not. The
# same share `jzk validate` checks a plan's estimate against (config/fit_rules.py).
HEADROOM = fit_rules.HEADROOM
# Bytes of optimizer state per byte of parameters: AdamW keeps two moments, SGD one.
STATE_PER_PARAM = {"adamw": 2, "sgd": 1}


class Memory(Protocol):
    """What a trial reads of the device's memory: DeviceMemory, or a test's fake limit."""

    device: torch.device

    def capacity(self) -> int: ...
    def reset(self) -> None: ...
    def peak(self) -> int: ...
    def name(self) -> str: ...


@dataclass
class DeviceMemory:
    """The GPU's memory as a trial sees it (a test fakes it with a limit of its own)."""

    device: torch.device

    def capacity(self) -> int:
        return torch.cuda.get_device_properties(self.device).total_memory

    def reset(self) -> None:
        torch.cuda.synchronize(self.device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(self.device)

    def peak(self) -> int:
        torch.cuda.synchronize(self.device)
        return torch.cuda.max_memory_allocated(self.device)

    def name(self) -> str:
        return torch.cuda.get_device_name(self.device)


@dataclass
class Trial:
    """What one trial runs: the model, its loss, the run's autocast, m samples."""

    model: nn.Module
    compute_loss: Callable[[nn.Module, Any], torch.Tensor]
    autocast: Callable[[], Any]
    make_batch: Callable[[int], Any]
    memory: Memory
    ballast_bytes: int = 0
    peaks: dict[int, int] = field(default_factory=dict)  # size -> peak bytes, where it ran

    def fits(self, size: int) -> bool:
        """One forward and backward of `size` samples: within HEADROOM of the memory, and
        no out-of-memory error. The gradients and the memory are released either way."""
        self.memory.reset()
        try:
            self.peaks[size] = self._peak_of(size)
            return self.peaks[size] <= HEADROOM * self.memory.capacity()
        except torch.OutOfMemoryError:
            return False  # the error is gone here, and with it the frame holding the tensors
        finally:
            self.model.zero_grad(set_to_none=True)
            self.memory.reset()

    def _peak_of(self, size: int) -> int:
        # Its own frame: the ballast, the batch and the activations die when it returns.
        device = self.memory.device
        ballast = torch.empty(self.ballast_bytes, dtype=torch.uint8, device=device)
        batch = to_device(self.make_batch(size), device)
        with self.autocast():
            loss = self.compute_loss(self.model, batch)
        loss.backward()
        del ballast, batch, loss
        return self.memory.peak()


def search(trial: Trial, options: list[int], start: int = 0, why: str = "") -> tuple[int, str]:
    """The largest option that fits and the line saying why; the RNGs are put back.
    start: the index the search begins at (the memory estimate's, `why` says so)."""
    cpu_rng = torch.get_rng_state()
    cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    started = time.perf_counter()
    try:
        chosen, log = largest_fitting(options, trial.fits, start)
    finally:
        torch.set_rng_state(cpu_rng)
        if cuda_rng is not None:
            torch.cuda.set_rng_state_all(cuda_rng)
    per_replica = options[-1]
    if not chosen:
        raise JzkError(
            f"train.micro_batch_size=auto: not even {options[0]} sample(s) fit on "
            f"{trial.memory.name()} for one forward and backward. HINT: set "
            "train.activation_checkpointing=true, a smaller model, or parallel.mode=fsdp "
            "to shard it (with a numeric train.micro_batch_size)"
        )
    line = explain(chosen, per_replica, log, trial.memory.name())
    peak, capacity = trial.peaks.get(chosen), trial.memory.capacity()
    if peak is not None:  # what a user sizes the rest of the run by
        line += (
            f"; its trial peaked at {peak / 2**30:.1f} GiB of {capacity / 2**30:.1f} GiB "
            f"({(capacity - peak) / 2**30:.1f} GiB free)"
        )
    began = f"; {why}" if why else ""
    return chosen, f"{line}{began}; searched in {time.perf_counter() - started:.1f} s"


def with_micro_batch(spec: JobSpec, size: int) -> JobSpec:
    """The spec of a run configured with train.micro_batch_size=size (the evaluation's
    micro-batch follows where eval.micro_batch_size is null)."""
    per_replica = spec.train.global_batch_size // spec.layout.dp_size
    train = replace(spec.train, micro_batch_size=size, grad_accum_steps=per_replica // size)
    evaluation = spec.eval
    if "eval.micro_batch_size" in spec.auto_keys:  # null: it follows the training's
        evaluation = replace(spec.eval, micro_batch_size=size)
    return replace(spec, train=train, eval=evaluation)


def options_of(spec: JobSpec) -> list[int]:
    """The sizes auto may choose on this run's layout (the validation's own rule)."""
    lay = spec.layout
    return auto_options(
        spec.train.global_batch_size, lay.dp_size, lay.mode, spec.resources.gpus_per_node
    )


def for_check(spec: JobSpec) -> JobSpec:
    """The start-of-run contract check reads one micro-batch: with auto, a small one (what
    the CPU would take), never the whole per-replica batch the search starts from."""
    if not spec.train.micro_batch_auto:
        return spec
    return with_micro_batch(spec, largest_at_most(options_of(spec), CPU_FALLBACK))


def recorded(run_dir: RunDir, options: list[int]) -> int | None:
    """The size this run chose at its start, if it is still a valid choice."""
    try:
        size = json.loads(run_dir.micro_batch.read_text())["micro_batch_size"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return size if size in options else None


def record(run_dir: RunDir, size: int, line: str) -> None:
    text = json.dumps({"micro_batch_size": size, "why": line}, indent=1) + "\n"
    write_durably(run_dir.micro_batch, text.encode())


def choose_on_rank0(
    spec: JobSpec,
    run_dir: RunDir,
    make_trial: Callable[[], Trial] | None,
    start: Callable[[list[int]], tuple[int, str]] | None = None,
) -> int:
    """Rank 0's choice: the recorded one, the CPU's, or the search's (printed, recorded)."""
    options = options_of(spec)
    earlier = recorded(run_dir, options)
    if earlier is not None:
        line = (
            f"train.micro_batch_size=auto: {earlier}, as chosen at the run's start "
            f"({run_dir.micro_batch})"
        )
    elif make_trial is None:
        earlier = largest_at_most(options, CPU_FALLBACK)
        line = (
            f"train.micro_batch_size=auto: {earlier} on the CPU (no GPU memory to measure: "
            f"the default {CPU_FALLBACK}, or the largest size below it that divides the "
            f"{options[-1]} samples per replica)"
        )
        record(run_dir, earlier, line)
    else:
        trial = make_trial()
        index, why = start(options) if start is not None else (0, "")
        earlier, line = search(trial, options, index, why)
        record(run_dir, earlier, line)
    print(line, file=sys.stderr, flush=True)
    return earlier


def agree(size: int) -> int:
    """Every rank takes rank 0's choice (a no-op without a process group)."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized() or dist.get_world_size() == 1:
        return size
    box = [size]
    dist.broadcast_object_list(box, src=0)
    return int(box[0])


def settle(
    spec: JobSpec,
    *,
    is_main: bool,
    device: torch.device,
    model: nn.Module,
    compute_loss: Callable[[nn.Module, Any], torch.Tensor],
    autocast: Callable[[], Any],
    dataset: Any,
    run_dir: RunDir,
) -> JobSpec:
    """The spec this rank trains with: train.micro_batch_size=auto settled (rank 0
    chooses, every rank agrees); any other spec as it is."""
    if not spec.train.micro_batch_auto:
        return spec
    size = 0
    if is_main:
        make_trial, start = None, None
        if device.type == "cuda":

            def start(options: list[int]) -> tuple[int, str]:
                return estimated_start(spec, options, device)

            def make_trial() -> Trial:
                return Trial(
                    model.to(device),
                    compute_loss,
                    autocast,
                    lambda size: first_samples(spec, dataset, size),
                    DeviceMemory(device),
                    ballast_bytes=held_besides(spec, model),
                )

        size = choose_on_rank0(spec, run_dir, make_trial, start)
    return with_micro_batch(spec, agree(size))


def first_samples(spec: JobSpec, dataset: Any, size: int) -> Any:
    """`size` samples of the dataset, collated as the run's loader collates them."""
    from jeanzay_kit.train.loader import sample_batch

    return sample_batch(spec.loader.collate_fn, dataset, size)


def held_besides(spec: JobSpec, model: nn.Module) -> int:
    """Bytes a training step holds that a trial's forward and backward do not: the
    optimizer's state, and DDP's gradient buckets when there are replicas."""
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    buckets = 1 if spec.layout.mode == "ddp" and spec.layout.dp_size > 1 else 0
    return param_bytes * (STATE_PER_PARAM.get(spec.optim.name, 2) + buckets)


def estimated_start(spec: JobSpec, options: list[int], device: torch.device) -> tuple[int, str]:
    """Where the search starts: the largest size the memory estimate fits on this GPU
    (train/fit_estimate.py, traced on fake tensors: the estimate `jzk validate` shows);
    the smallest where the model cannot be traced so."""
    try:
        return auto_start(spec, options, DeviceMemory(device).capacity())
    except Exception as err:  # noqa: BLE001  # a model fake tensors cannot build
        return 0, f"started at {options[0]} (no memory estimate: {type(err).__name__})"


def estimate_at(spec: JobSpec, micro: int) -> int:
    """The per-GPU peak of this plan with `micro` samples per micro-batch, traced on
    fake tensors (train/fit_estimate.py)."""
    from jeanzay_kit.train.fit_estimate import combine, trace_spec

    fixed = with_micro_batch(spec, micro)
    fixed = replace(fixed, train=replace(fixed.train, micro_batch_auto=False))
    return combine(fixed, trace_spec(fixed)).total


def auto_start(spec: JobSpec, options: list[int], capacity: int) -> tuple[int, str]:
    """train.micro_batch_size=auto on a GPU of `capacity` bytes: the index of the option
    the estimate says is the largest that fits (traced at the two smallest options, the
    line through them), where the real search starts, and a few words saying so."""
    first = (options[0], estimate_at(spec, options[0]))
    second = (options[1], estimate_at(spec, options[1])) if len(options) > 1 else first
    limit = int(capacity * fit_rules.HEADROOM)
    index = fit_rules.largest_on_line(options, first, second, limit)
    words = (
        f"started at {options[index]}, the largest the memory estimate fits "
        f"({fit_rules.gib(first[1])} at {first[0]}, {fit_rules.gib(second[1])} at {second[0]})"
    )
    return index, words
