"""The per-GPU estimate of a job's plan: its training step traced on fake tensors
(train/memory_trace.py), then the plan's arithmetic (config/fit_rules.py). Used before
the queue (launch/fit_check.py, with its cache) and on the node by
train.micro_batch_size=auto (train/micro_batch.py). torch is imported only to trace.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

from jeanzay_kit.config import fit_rules as rules
from jeanzay_kit.config.spec import JobSpec

PIPELINES = ("pipeline", "pipeline_ddp")


def plan_of(spec: JobSpec) -> rules.Plan:
    lay = spec.layout
    return rules.Plan(
        mode=lay.mode,
        dp_size=lay.dp_size,
        pp_size=lay.pp_size,
        # A pipeline's optimizer step is one schedule step over microbatches x
        # accumulation pipeline micro-batches (train/strategies/pipeline.py).
        microbatches=lay.microbatches * spec.train.grad_accum_steps,
        schedule=lay.schedule,
        gpus_per_node=spec.resources.gpus_per_node,
    )


def traced_micro_batch(spec: JobSpec) -> int:
    """The samples one GPU runs forward at once: micro-batch=auto is checked at its
    smallest choice (the run searches upward from what fits)."""
    micro = spec.train.micro_batch_size
    if spec.train.micro_batch_auto:
        from jeanzay_kit.config.micro_batch_rules import auto_options

        lay = spec.layout
        micro = auto_options(
            spec.train.global_batch_size, lay.dp_size, lay.mode, spec.resources.gpus_per_node
        )[0]
    if spec.layout.mode in PIPELINES:
        return max(1, micro // spec.layout.microbatches)
    if spec.layout.mode == "dataparallel":
        return max(1, math.ceil(micro / spec.resources.gpus_per_node))
    return micro


def accumulates_gradients(spec: JobSpec) -> bool:
    """Whether the backward that peaks runs with every gradient already held:
    accumulation, or 1F1B's later pipeline micro-batches (as many in flight at each).
    GPipe holds the most activations at its first backward, before any gradient (the
    step before set them to None), and fewer at each later one."""
    lay = spec.layout
    if lay.mode in PIPELINES:
        return lay.schedule != "gpipe" and lay.microbatches * spec.train.grad_accum_steps > 1
    return spec.train.grad_accum_steps > 1


def combine(spec: JobSpec, found: list[rules.Traced]) -> rules.Estimate:
    """One GPU's peak for this plan from its traced step(s)."""
    plan = plan_of(spec)
    if plan.mode in PIPELINES:
        return rules.pipeline(plan, found)
    return rules.replicated(plan, found[0])


def trace_spec(spec: JobSpec) -> list[rules.Traced]:
    """Build the job's model on fake tensors and trace its step (train/memory_trace.py)."""
    with warnings.catch_warnings():
        # torch warns when deepcopy (a pipeline chunk) reads a fake tensor's data
        # pointer: there is no data, and nothing reads it.
        warnings.filterwarnings("ignore", "Accessing the data pointer of FakeTensor")
        return _trace(spec)


def _trace(spec: JobSpec) -> list[rules.Traced]:
    import torch

    from jeanzay_kit.train import memory_trace as mt
    from jeanzay_kit.train.components import (
        build_dataset,
        build_loss,
        build_model,
        build_optimizer,
    )
    from jeanzay_kit.train.loader import sample_batch

    samples = sample_batch(spec.loader.collate_fn, build_dataset(spec), traced_micro_batch(spec))
    cuda = torch.device("cuda")  # what the job runs on: the optimizer's fused default

    def make_optimizer(params: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
        return build_optimizer(params, spec.optim, cuda)

    # The CPU's autocast in bf16 for fp16 too: the same two bytes per element, and
    # every CPU build has bf16 kernels.
    low = spec.train.precision in ("bf16", "fp16")

    def autocast() -> Any:
        return torch.autocast("cpu", dtype=torch.bfloat16, enabled=low)

    accumulates = accumulates_gradients(spec)
    with mt.fake_mode() as mode:
        model = build_model(spec, warn=False)
        batch = mt.as_fake(mode, samples)
        loss = build_loss(spec, model)
        if spec.layout.mode not in PIPELINES:

            def run(module: torch.nn.Module) -> torch.Tensor:
                with autocast():
                    return loss(module, batch)

            return [mt.trace(model, run, make_optimizer, accumulates)]
        return _trace_stages(
            spec,
            model=model,
            batch=batch,
            loss=loss,
            autocast=autocast,
            make_optimizer=make_optimizer,
            accumulates=accumulates,
        )


def _trace_stages(
    spec: JobSpec,
    *,
    model: Any,
    batch: Any,
    loss: Any,
    autocast: Callable[[], Any],
    make_optimizer: Callable[..., Any],
    accumulates: bool,
) -> list[rules.Traced]:
    from jeanzay_kit.train import memory_trace as mt
    from jeanzay_kit.train.batch import split_batch

    count = spec.layout.pp_size
    chunks = [model.pipeline_chunk(i, count) for i in range(count)]
    args, _kwargs, target = split_batch(batch, spec.loss.target_key)
    inputs = mt.stage_inputs(chunks, args[0])
    pipe_loss = loss.pipeline_loss()
    return [
        mt.trace(
            chunk,
            mt.run_stage(inp, target, i == count - 1, pipe_loss, autocast),
            make_optimizer,
            accumulates,
        )
        for i, (chunk, inp) in enumerate(zip(chunks, inputs, strict=True))
    ]
