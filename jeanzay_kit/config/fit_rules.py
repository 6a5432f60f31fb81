"""Will the plan fit? Per-GPU peak memory of a parallel plan, from traced training steps.

train/memory_trace.py traces one training step of the user's model on fake tensors with
torch's MemTracker and hands over what it held at its peaks (`Traced`). This module only
does the arithmetic that turns those traced bytes into one GPU's peak for a parallel mode,
compares it with the GPU's memory, and orders the changes a hint may propose. Pure.

What is traced and what is computed here (docs/parallelism.md "Will it fit?"):
- traced: parameters, gradients, optimizer states, buffers, activations and temporaries
  of one replica's forward, backward and optimizer step (or of one pipeline stage's);
- computed from traced sizes, where torch has no tracker for one process: DDP's gradient
  buckets (one flat copy of the gradients), FSDP's sharding (states / data-parallel size)
  and its gathered parameters (the root unit, the running and the prefetched block, and
  the block's unsharded gradients before the reduce-scatter), the micro-batches a
  pipeline stage holds at once, and the outputs DataParallel gathers on its first GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

# The share of a GPU's memory a plan may reach: the rest is the CUDA context (not counted
# by the allocator), fragmentation over a long run, and what the trace cannot see (NCCL's
# own buffers). The same share the micro-batch search keeps (train/micro_batch.py).
HEADROOM = 0.90
GIB = 2**30


@dataclass(frozen=True)
class Usage:
    """Bytes held at one moment of a traced step, by what holds them (MemTracker's kinds)."""

    params: int = 0
    buffers: int = 0
    grads: int = 0
    optimizer: int = 0
    activations: int = 0
    temporary: int = 0
    other: int = 0

    @property
    def states(self) -> int:
        """Parameters, gradients and optimizer states: what sharding divides."""
        return self.params + self.grads + self.optimizer

    @property
    def total(self) -> int:
        return self.states + self.buffers + self.activations + self.temporary + self.other


@dataclass(frozen=True)
class Traced:
    """One traced training step of one replica (or one pipeline stage)."""

    backward: Usage  # the peak of forward + backward, optimizer states already there
    step: Usage  # the peak of the optimizer step
    forward_activations: int  # activations held at the end of one micro-batch's forward
    param_bytes: int  # every parameter of what was traced
    grad_bytes: int  # every gradient, as the backward leaves them
    root_bytes: int = 0  # parameters outside the blocks (FSDP's root unit)
    block_bytes: int = 0  # the largest block's parameters (one FSDP unit)
    output_bytes: int = 0  # the model's output for the traced micro-batch


@dataclass(frozen=True)
class Plan:
    """What the arithmetic needs of a validated job."""

    mode: str  # ddp | fsdp | pipeline | pipeline_ddp | dataparallel
    dp_size: int
    pp_size: int = 1
    microbatches: int = 1  # pipeline micro-batches per micro-batch
    schedule: str = "1f1b"
    gpus_per_node: int = 1


@dataclass(frozen=True)
class Estimate:
    """One GPU's peak, split as `jzk validate` shows it."""

    model_states: int  # parameters, gradients, optimizer states (sharded where they are)
    activations: int  # activations and backward temporaries of what the GPU holds at once
    buffers: int  # module buffers, DDP buckets, FSDP's gathered parameters, gathered outputs
    where: str = ""  # which stage or phase peaks

    @property
    def total(self) -> int:
        return self.model_states + self.activations + self.buffers


def _split(use: Usage, extra: int = 0, divide: int = 1, where: str = "") -> Estimate:
    return Estimate(
        model_states=-(-use.states // divide),
        activations=use.activations + use.temporary,
        buffers=use.buffers + use.other + extra,
        where=where,
    )


def _larger(*estimates: Estimate) -> Estimate:
    return max(estimates, key=lambda e: e.total)


def replicated(plan: Plan, traced: Traced) -> Estimate:
    """ddp, fsdp and dataparallel: one traced replica, then what each mode adds or divides."""
    if plan.mode == "fsdp" and plan.dp_size > 1:
        n = plan.dp_size
        # Gathered during forward and backward: the root unit (FSDP2 keeps it unsharded
        # between forward and backward), the running block and the prefetched one, and
        # the running block's unsharded gradients until their reduce-scatter.
        gathered = traced.root_bytes + 3 * traced.block_bytes
        return _larger(
            _split(traced.backward, gathered, n, "backward"),
            _split(traced.step, 0, n, "optimizer step"),
        )
    if plan.mode == "dataparallel" and plan.gpus_per_node > 1:
        # The first GPU holds the module, its gradients and optimizer, its share of the
        # batch, and gathers every replica's output.
        gathered = traced.output_bytes * (plan.gpus_per_node - 1)
        return _larger(
            _split(traced.backward, gathered, where="backward"),
            _split(traced.step, where="optimizer step"),
        )
    buckets = traced.grad_bytes if plan.mode == "ddp" and plan.dp_size > 1 else 0
    return _larger(
        _split(traced.backward, buckets, where="backward"),
        _split(traced.step, buckets, where="optimizer step"),
    )


def in_flight(plan: Plan, stage: int) -> int:
    """Micro-batches whose activations stage `stage` holds at once: GPipe runs every
    forward first; torch's 1F1B (and, approximately, its interleaved form) runs one
    forward per stage from this one to the last, then a forward before each backward."""
    if plan.schedule == "gpipe":
        return plan.microbatches
    return max(1, min(plan.microbatches, plan.pp_size - stage + 1))


def pipeline(plan: Plan, stages: list[Traced]) -> Estimate:
    """pipeline, pipeline_ddp: the stage that peaks highest, each traced on its own chunk
    with one pipeline micro-batch, holding in_flight() of them."""
    estimates = []
    for index, traced in enumerate(stages):
        held = (in_flight(plan, index) - 1) * traced.forward_activations
        # pipeline_ddp averages a stage's gradients after the schedule with one coalesced
        # all-reduce (train/strategies/pipeline.py): a flat copy of them, before the step.
        buckets = traced.grad_bytes if plan.mode == "pipeline_ddp" and plan.dp_size > 1 else 0
        back = _split(traced.backward, where=f"stage {index} backward")
        back = Estimate(back.model_states, back.activations + held, back.buffers, back.where)
        estimates.append(_larger(back, _split(traced.step, buckets, where=f"stage {index} step")))
    return _larger(*estimates)


def states_floor(plan: Plan, traced: Traced) -> int:
    """The least a GPU holds in this mode whatever the micro-batch or recomputation: its
    optimizer step (its share of the model states, the step's temporaries, DDP's
    buckets), or a pipeline stage's share of the states. A hint's candidate above the
    limit is skipped untraced."""
    if plan.mode in ("pipeline", "pipeline_ddp"):
        return (traced.param_bytes * 2 + traced.step.optimizer) // max(plan.pp_size, 1)
    at_step = replace(traced, backward=traced.step, root_bytes=0, block_bytes=0, output_bytes=0)
    return replicated(plan, at_step).total


def changed_plan(plan: Plan, nodes: int, change: tuple[str, ...]) -> Plan:
    """The plan a hint's change makes, as far as model states go (its mode and its
    data-parallel size): enough to skip a change that cannot fit before composing it."""
    values = dict(item.partition("=")[::2] for item in change)
    mode = values.get("parallel", plan.mode)
    new_nodes = int(values.get("resources.nodes", nodes))
    world = new_nodes * plan.gpus_per_node
    pp = plan.pp_size if mode in ("pipeline", "pipeline_ddp") else 1
    dp = 1 if mode == "dataparallel" else max(1, world // pp)
    return Plan(mode, dp, pp, plan.microbatches, plan.schedule, plan.gpus_per_node)


def largest_on_line(
    options: list[int], first: tuple[int, int], second: tuple[int, int], limit: int
) -> int:
    """The index of the largest option whose peak, on the line through two estimates
    (micro-batch, bytes), stays within limit: activations grow with the samples, the
    rest does not. 0 when none does (train.micro_batch_size=auto starts its search here)."""
    (m0, p0), (m1, p1) = first, second
    slope = (p1 - p0) / (m1 - m0) if m1 != m0 else 0.0
    fitting = [i for i, m in enumerate(options) if p0 + slope * (m - m0) <= limit]
    return fitting[-1] if fitting else 0


def usable_bytes(gpu_mb: int) -> int:
    """What a plan may use of a GPU of gpu_mb MB."""
    return int(gpu_mb * 2**20 * HEADROOM)


def gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB" if n >= GIB else f"{n / 2**20:.0f} MiB"


def describe(estimate: Estimate) -> str:
    """The per-GPU split, as `jzk validate --sizes` and the refusal say it."""
    return (
        f"{gib(estimate.total)} per GPU (model states {gib(estimate.model_states)}, "
        f"activations {gib(estimate.activations)}, buffers {gib(estimate.buffers)}"
        + (f"; peak at the {estimate.where}" if estimate.where else "")
        + ")"
    )


def gpu_words(gpu_mb: int, gpu: str) -> str:
    name = f" ({gpu})" if gpu else ""
    return f"{gpu_mb / 1024:.0f} GiB GPU{name}, {HEADROOM:.0%} usable: {gib(usable_bytes(gpu_mb))}"


def refusal(
    mode: str,
    estimate: Estimate,
    gpu_mb: int,
    gpu: str,
    hint: tuple[tuple[str, ...], Estimate] | None,
) -> str:
    """The one line a plan above the GPU's memory gets."""
    line = (
        f"parallel.mode={mode} needs {describe(estimate)}, more than the "
        f"{gpu_words(gpu_mb, gpu)}: it would die of out-of-memory at its first step."
    )
    if hint is None:
        return (
            line + " HINT: no change tried fits (fsdp, activation checkpointing, smaller "
            "micro-batches, more nodes): a smaller model, or a cluster with larger GPUs"
        )
    overrides, fitted = hint
    return line + f" HINT: {' '.join(overrides)} ({gib(fitted.total)} per GPU)"


@dataclass(frozen=True)
class Knobs:
    """What a hint may change, as the validated job has it."""

    mode: str
    micro_batch_size: int
    smaller_micro_batches: tuple[int, ...]  # valid micro-batch sizes below it, largest first
    activation_checkpointing: bool
    nodes: int
    per_replica: int | None  # samples per replica per step; None: global batch auto
    larger_constraints: tuple[str, ...]  # constraints of this partition with more memory


def candidates(k: Knobs) -> list[tuple[str, ...]]:
    """The changes a hint tries, in order: data parallelism while it fits (smaller
    micro-batches, then recomputation), then FSDP (same, then on larger GPUs), then more
    nodes. The first whose plan fits is the hint."""
    ckpt: tuple[str, ...] = (
        () if k.activation_checkpointing else ("train.activation_checkpointing=true",)
    )
    smaller = [(f"train.micro_batch_size={m}",) for m in k.smaller_micro_batches]
    lighter = [*smaller, ckpt, *[ckpt + m for m in smaller]] if ckpt else smaller
    out: list[tuple[str, ...]] = []
    if k.mode in ("ddp", "dataparallel", "pipeline", "pipeline_ddp"):
        out += [m for m in lighter if m]
    fsdp: tuple[str, ...] = () if k.mode == "fsdp" else ("parallel=fsdp",)
    out += [fsdp + m for m in [(), *lighter] if fsdp + m]
    for constraint in k.larger_constraints:
        where: tuple[str, ...] = (f"resources.constraint={constraint}",)
        out += [fsdp + where + m for m in [(), *lighter]]
    for factor in (2, 4, 8, 16):
        nodes: tuple[str, ...] = (f"resources.nodes={k.nodes * factor}",)
        if k.per_replica is not None:  # the global batch spread over more replicas
            per, rest = divmod(k.per_replica, factor)
            if rest or per < 1:
                continue
            if per < k.micro_batch_size:
                nodes += (f"train.micro_batch_size={per}",)
        places: list[tuple[str, ...]] = [
            (),
            *((f"resources.constraint={c}",) for c in k.larger_constraints),
        ]
        for where in places:
            out += [fsdp + nodes + where, fsdp + nodes + where + ckpt]
    return [c for c in dict.fromkeys(out) if c]  # each once, in order
