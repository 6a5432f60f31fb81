"""The training loop: read top to bottom, one optimizer step per iteration.

Receives values (the JobSpec and the process-group context); reads no environment.
The global batch is the same whatever the world size: each step, every data-parallel
rank runs `grad_accum_steps` micro-batches of `micro_batch_size` samples (see
train/sampler.py), and the strategy averages gradients across ranks. `train` builds
(data, model, strategy, optimizer, checkpointer, each by a named helper), resumes, then
loops.
"""

from __future__ import annotations

import contextlib
import math
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from hydra.utils import instantiate

from jeanzay_kit.ckpt.checkpointer import Checkpointer
from jeanzay_kit.ckpt.digest import state_digest
from jeanzay_kit.ckpt.trainer_state import TrainerState
from jeanzay_kit.config.sections import OptimSettings
from jeanzay_kit.config.spec import JobSpec
from jeanzay_kit.distributed.process_group import DistContext
from jeanzay_kit.errors import CheckpointWriteError, NonFiniteLoss
from jeanzay_kit.train.heartbeat import Heartbeat
from jeanzay_kit.train.metrics import MetricsWriter, peak_flops
from jeanzay_kit.train.preemption import StopRequest, agree, signal_name
from jeanzay_kit.train.sampler import GlobalBatchPlan
from jeanzay_kit.train.strategies.base import Strategy


@dataclass
class TrainResult:
    steps: int  # the last step saved
    final_loss: float | None
    digest: str | None  # of the full model, on rank 0, when training finished
    stopped_by: str = ""  # the signal that stopped training early ("" if it finished)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def lr_lambda(warmup: int, total: int, min_ratio: float) -> Callable[[int], float]:
    """Linear warmup to the peak, then cosine decay to min_ratio x peak."""

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return factor


def make_autocast(precision: str, device: torch.device) -> Callable[[], Any]:
    if precision in ("bf16", "fp16"):
        dtype = torch.bfloat16 if precision == "bf16" else torch.float16
        return lambda: torch.autocast(device_type=device.type, dtype=dtype)
    return contextlib.nullcontext


def resolve_precision(precision: str, device: torch.device) -> str:
    """precision=auto on the local profile: bf16 on a GPU that has it, fp16 on older GPUs,
    fp32 on the CPU (CPU autocast is rarely faster for these models)."""
    if precision != "auto":
        return precision
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    return "fp32"


def build_strategy(
    spec: JobSpec, ctx: DistContext, model: torch.nn.Module, precision: str
) -> Strategy:
    loss_fn = model.loss  # type: ignore[attr-defined]
    autocast = make_autocast(precision, ctx.device)
    scaler = (
        torch.amp.GradScaler("cuda") if precision == "fp16" and ctx.device.type == "cuda" else None
    )
    common = dict(ctx=ctx, loss_fn=loss_fn, autocast=autocast, scaler=scaler)
    mode = spec.layout.mode
    if mode == "ddp":
        from jeanzay_kit.train.strategies.ddp import DDPStrategy

        return DDPStrategy(
            model,
            bucket_cap_mb=spec.comm.bucket_cap_mb,
            compile_model=spec.train.compile,
            **common,
        )
    if mode == "fsdp":
        from jeanzay_kit.train.strategies.fsdp import FSDPStrategy

        return FSDPStrategy(model, compile_model=spec.train.compile, **common)
    if mode == "dataparallel":
        from jeanzay_kit.train.strategies.dataparallel import DataParallelStrategy

        return DataParallelStrategy(model, **common)
    from jeanzay_kit.train.strategies.pipeline import PipelineStrategy

    n_micro = spec.layout.microbatches * spec.train.grad_accum_steps
    return PipelineStrategy(model, n_microbatches=n_micro, **common)


def build_optimizer(params, optim: OptimSettings) -> torch.optim.Optimizer:
    """optim.name: adamw or sgd (with momentum)."""
    if optim.name == "sgd":
        return torch.optim.SGD(
            params, lr=optim.lr, momentum=optim.momentum, weight_decay=optim.weight_decay
        )
    return torch.optim.AdamW(
        params, lr=optim.lr, betas=optim.betas, weight_decay=optim.weight_decay
    )


def build_scheduler(
    optimizer: torch.optim.Optimizer, optim: OptimSettings, steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    factor = lr_lambda(optim.warmup_steps or 1, steps, optim.min_lr_ratio)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def build_checkpointer(
    spec: JobSpec,
    strategy: Strategy,
    optimizer: torch.optim.Optimizer,
    ctx: DistContext,
    run_dir: Path,
) -> Checkpointer:
    """The checkpointer of this run; it records the layout a resume is compared with."""
    return Checkpointer(
        run_dir,
        strategy.state_module(),
        optimizer,
        ctx.info.rank,
        spec.layout.checkpoint_world(),
        spec.config,
        ctx.device,
        keep_last=spec.checkpoint.keep_last,
        use_async=spec.checkpoint.use_async,
    )


def resume(
    spec: JobSpec,
    ckpt: Checkpointer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    strategy: Strategy,
    ctx: DistContext,
) -> TrainerState:
    """Load the checkpoint that checkpoint.resume names, if any: its step, global sample
    index and last loss (step 0 and nothing else for a fresh start)."""
    folder = ckpt.find(spec.checkpoint.resume)
    if folder is None:
        return TrainerState(0, 0, {}, None, None)
    ckpt.check_compatible(folder, spec.checkpoint.allow_config_change)
    state = ckpt.load(folder)
    scheduler.load_state_dict(state.scheduler)
    if strategy.scaler is not None and state.scaler:
        strategy.scaler.load_state_dict(state.scaler)
    if ctx.is_main:
        print(f"resumed from {folder} (step {state.step})", flush=True)
    return state


def _throughput(
    spec: JobSpec, step: int, loss: float | None, lr: float, step_time: float
) -> dict[str, Any]:
    return {
        "step": step,
        "loss": loss,
        "lr": lr,
        "step_time_s": step_time,
        "samples_per_s": spec.train.global_batch_size / step_time,
    }


class _NoHeartbeat:
    def beat(self, step: int, phase: str) -> None:
        pass


def train(
    spec: JobSpec,
    ctx: DistContext,
    run_dir: Path,
    stop: StopRequest | None = None,
    heartbeat: Heartbeat | None = None,
    allocation_end: float | None = None,
) -> TrainResult:
    """Train to spec.train.steps, resuming from the newest checkpoint; stop early (with a
    save) when `stop` notes a signal. allocation_end: when the Slurm allocation ends
    (epoch seconds), for the time left in the progress lines."""
    tset, cset = spec.train, spec.checkpoint
    steps = tset.steps
    hb = heartbeat or _NoHeartbeat()  # the phase a watchdog reports if this rank stalls

    # ---- build: data, model, strategy, optimizer, checkpointer ----------------------------
    # Same seed on every rank: every rank builds the same initial model, whatever the
    # mode, before it is wrapped, sharded or split.
    seed_everything(tset.seed)
    dataset = instantiate(spec.data)
    model = instantiate(spec.model)
    model.activation_checkpointing = tset.activation_checkpointing
    strategy = build_strategy(spec, ctx, model, resolve_precision(tset.precision, ctx.device))
    optimizer = build_optimizer(strategy.parameters(), spec.optim)
    scheduler = build_scheduler(optimizer, spec.optim, steps)
    ckpt = build_checkpointer(spec, strategy, optimizer, ctx, run_dir)

    # ---- resume: the newest complete checkpoint of this run directory -------------------
    resumed = resume(spec, ckpt, scheduler, strategy, ctx)
    start_step, loss_value = resumed.step, resumed.last_loss
    if start_step >= steps and ctx.is_main:
        print(
            f"note: the run directory {run_dir} already holds step {start_step} "
            f"(train.steps={steps}): nothing left to train. HINT: raise train.steps to "
            "train on; for a fresh run use another job.name (a new run directory) or "
            "resume=never",
            file=sys.stderr,
            flush=True,
        )

    # ---- data order: the same global batches whatever the world size ----------------------
    # Hold out the end of the dataset for evaluation; train on the rest.
    eval_count = int(len(dataset) * tset.eval_fraction)
    lay = spec.layout
    plan = GlobalBatchPlan(
        dataset_size=len(dataset) - eval_count,
        global_batch=tset.global_batch_size,
        micro_batch=tset.micro_batch_size,
        dp_size=lay.dp_size,
        dp_rank=ctx.dp_rank,
        seed=tset.seed,
        # The checkpoint's global sample index: valid whatever the world size it was
        # saved on, so no sample of the epoch is seen twice or skipped.
        start_step=start_step,
        start_position=resumed.sample_position,
    )
    eval_rounds = _eval_rounds(dataset, plan, eval_count, spec, ctx, tset.eval_batches)
    every_seconds = (cset.every_minutes or 0) * 60
    flops = getattr(model, "flops_per_sample", lambda: 0.0)()
    peak = peak_flops(torch.cuda.get_device_name(ctx.device)) if ctx.device.type == "cuda" else None
    metrics = MetricsWriter(
        run_dir,
        ctx.is_main,
        steps,
        resume_step=start_step,
        end_time=allocation_end,
        allocation_s=spec.resources.time_minutes * 60 if spec.cluster.is_slurm else None,
        lead_s=spec.preemption.lead_seconds,
        tensorboard=spec.metrics.tensorboard,
    )
    own_stop = stop is None
    stop = stop or StopRequest()

    def to_device(batch: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        return batch[0].to(ctx.device, non_blocking=True), batch[1].to(
            ctx.device, non_blocking=True
        )

    def save(done: int, force_sync: bool = False) -> None:
        hb.beat(done, "checkpoint")
        with _on_write_error(cset.on_write_error, ctx.is_main):
            ckpt.save(
                done,
                TrainerState(
                    done,
                    plan.sample_position(done),
                    scheduler.state_dict(),
                    strategy.scaler.state_dict() if strategy.scaler else None,
                    loss_value,
                ),
                force_sync=force_sync,
            )

    # ---- the loop -------------------------------------------------------------------------
    strategy.train(True)
    window_start, window_steps = time.perf_counter(), 0
    last_save_time, saved_at = time.monotonic(), start_step
    stopped_by = ""
    for step in range(start_step, steps):
        hb.beat(step, "data")
        batches = [to_device(dataset.batch(idx)) for idx in plan.step_indices(step)]
        if step == start_step > 0:
            strategy.before_resumed_steps(batches[0])
        hb.beat(step, "forward_backward")
        local_loss = strategy.train_step(batches)
        hb.beat(step, "optimizer")
        if strategy.scaler is not None:
            strategy.scaler.unscale_(optimizer)
        if spec.optim.grad_clip > 0:
            strategy.clip_grad_norm(spec.optim.grad_clip)
        # One collective per step, before the update, so every rank decides alike: a
        # signal, a save due by time, and whether any rank's loss is NaN or infinite (a
        # flag on the device: no sync of its own).
        time_due = int(
            ctx.is_main and every_seconds > 0 and time.monotonic() - last_save_time >= every_seconds
        )
        not_finite = (~torch.isfinite(local_loss.detach())).any().reshape(1)
        signum, time_due, bad = agree([stop.signum, time_due], ctx.device, extra=not_finite)
        if bad:
            _on_nonfinite(tset.nonfinite, step + 1, ckpt, ctx.is_main)
        else:
            ckpt.before_update()  # an asynchronous save may still be copying the weights
            if strategy.scaler is not None:
                strategy.scaler.step(optimizer)
                strategy.scaler.update()
            else:
                optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        scheduler.step()
        window_steps += 1
        metrics.advance(step + 1)

        done = step + 1
        if done % tset.log_every == 0 or done == steps:
            # One all-reduce of the loss per logged step, not per step.
            loss_value = strategy.global_mean(local_loss)
            if ctx.device.type == "cuda":
                torch.cuda.synchronize(ctx.device)
            elapsed = (time.perf_counter() - window_start) / window_steps
            record = _throughput(spec, done, loss_value, scheduler.get_last_lr()[0], elapsed)
            tokens = getattr(dataset, "tokens_per_sample", 0)
            if tokens:
                record["tokens_per_s"] = tset.global_batch_size * tokens / elapsed
            if peak and flops:
                record["mfu"] = flops * tset.global_batch_size / elapsed / (peak * lay.world_size)
            if tset.eval_every and (done % tset.eval_every == 0 or done == steps) and eval_rounds:
                hb.beat(done, "eval")
                record["eval_loss"] = _eval_loss(strategy, eval_rounds, ctx)
            metrics.log(record)
            window_start, window_steps = time.perf_counter(), 0

        # ---- step boundary: stop, save, or go on; every rank decides the same ----------
        hb.beat(done, "step_boundary")
        if signum:
            stopped_by = signal_name(signum)
            save(done, force_sync=True)
            saved_at = done
            if ctx.is_main:
                print(f"{stopped_by} received: saved step-{done} and stopping", flush=True)
            break
        if (cset.every_steps and done % cset.every_steps == 0) or time_due or done == steps:
            save(done, force_sync=done == steps)
            saved_at, last_save_time = done, time.monotonic()

    # ---- the end: last save sealed, final weights on rank 0 -------------------------------
    with _on_write_error(cset.on_write_error, ctx.is_main):
        ckpt.close()
    if own_stop:
        stop.restore()
    digest = None
    if not stopped_by:
        state = strategy.full_state_dict()
        if ctx.is_main and state is not None:
            digest = state_digest(state)
            torch.save(state, run_dir / "model_final.pt")
            (run_dir / "model_final.sha256").write_text(digest + "\n")
    metrics.close()
    return TrainResult(saved_at, loss_value, digest, stopped_by)


def _on_nonfinite(policy: str, step: int, ckpt: Checkpointer, is_main: bool) -> None:
    """train.nonfinite, on every rank alike: `stop` raises before the optimizer applies the
    step (after any save in flight is sealed); `skip` warns and drops the update."""
    if policy == "skip":
        if is_main:
            print(
                f"WARNING: non-finite loss at step {step}: its update was skipped "
                "(train.nonfinite=skip)",
                file=sys.stderr,
                flush=True,
            )
        return
    ckpt.wait()  # an asynchronous save of an earlier, good step: let it finish
    complete = [e.name for e in ckpt.store.entries() if e.has_manifest]
    kept = f"{complete[0]} is kept" if complete else "there is none yet"
    raise NonFiniteLoss(
        f"the loss is NaN or infinite at step {step} (train.nonfinite=stop): stopped before "
        f"the optimizer applied it; the newest complete checkpoint {kept}. HINT: lower "
        "optim.lr or set optim.grad_clip, look at the data of this step, or drop such steps "
        "with train.nonfinite=skip (the run resumes from its checkpoint either way)"
    )


@contextlib.contextmanager
def _on_write_error(policy: str, is_main: bool):
    """checkpoint.on_write_error: `stop` lets the error end the run (every rank raises it
    for the same save; exit 2, not requeued); `continue` warns loudly and trains on."""
    try:
        yield
    except CheckpointWriteError as err:
        if policy == "stop":
            raise
        if is_main:
            print(
                f"WARNING: {err}. Training goes on (checkpoint.on_write_error=continue): the "
                "next save tries again; until one succeeds, a stop loses every step since "
                "the newest complete checkpoint",
                file=sys.stderr,
                flush=True,
            )


def _eval_loss(strategy: Strategy, eval_rounds: list, ctx: DistContext) -> float:
    """The held-out loss, averaged over the eval rounds and the ranks."""
    strategy.train(False)
    losses = [strategy.eval_loss(batches) for batches in eval_rounds]
    strategy.train(True)
    local = torch.stack(
        [loss if loss is not None else torch.zeros((), device=ctx.device) for loss in losses]
    )
    return strategy.global_mean(local.mean())


def _eval_rounds(
    dataset, plan: GlobalBatchPlan, eval_count: int, spec: JobSpec, ctx: DistContext, rounds: int
) -> list[list[tuple[torch.Tensor, torch.Tensor]]]:
    """Held-out global batches, each split across ranks exactly like a training step.

    The eval set is the first `rounds` global batches after the training samples, so it
    is the same whatever the world size, and a pipeline evaluates it step by step.
    """
    g, m, dp = spec.train.global_batch_size, spec.train.micro_batch_size, spec.layout.dp_size
    out = []
    for r in range(min(rounds, eval_count // g)):
        first = plan.dataset_size + r * g
        micro = []
        for a in range(spec.train.grad_accum_steps):
            start = first + a * dp * m + ctx.dp_rank * m
            x, y = dataset.batch(np.arange(start, start + m))
            micro.append((x.to(ctx.device), y.to(ctx.device)))
        out.append(micro)
    return out
