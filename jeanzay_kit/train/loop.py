"""The training loop: read top to bottom, one optimizer step per iteration.

Receives values (the JobSpec, the config, the process-group context); reads no
environment. The global batch is the same whatever the world size: each step, every
data-parallel rank runs `grad_accum_steps` micro-batches of `micro_batch_size` samples
(see train/sampler.py), and the strategy averages gradients across ranks.
"""

from __future__ import annotations

import contextlib
import math
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from hydra.utils import instantiate

from jeanzay_kit.ckpt.checkpointer import Checkpointer, TrainerState
from jeanzay_kit.ckpt.digest import state_digest
from jeanzay_kit.config.spec import JobSpec
from jeanzay_kit.distributed.process_group import DistContext
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
    spec: JobSpec, cfg: Mapping[str, Any], ctx: DistContext, model: torch.nn.Module, precision: str
) -> Strategy:
    loss_fn = model.loss  # type: ignore[attr-defined]
    autocast = make_autocast(precision, ctx.device)
    scaler = (
        torch.amp.GradScaler("cuda") if precision == "fp16" and ctx.device.type == "cuda" else None
    )
    common = dict(ctx=ctx, loss_fn=loss_fn, autocast=autocast, scaler=scaler)
    mode = spec.layout.mode
    compile_model = bool(cfg["train"].get("compile", False))
    if mode == "ddp":
        from jeanzay_kit.train.strategies.ddp import DDPStrategy

        return DDPStrategy(
            model,
            bucket_cap_mb=float(cfg["parallel"].get("bucket_cap_mb", 25)),
            compile_model=compile_model,
            **common,
        )
    if mode == "fsdp":
        from jeanzay_kit.train.strategies.fsdp import FSDPStrategy

        return FSDPStrategy(model, compile_model=compile_model, **common)
    if mode == "dataparallel":
        from jeanzay_kit.train.strategies.dataparallel import DataParallelStrategy

        return DataParallelStrategy(model, **common)
    from jeanzay_kit.train.strategies.pipeline import PipelineStrategy

    n_micro = spec.layout.microbatches * spec.grad_accum_steps
    return PipelineStrategy(model, n_microbatches=n_micro, **common)


def build_optimizer(params, ocfg: Mapping[str, Any]) -> torch.optim.Optimizer:
    """optim.name: adamw (default) or sgd (with momentum)."""
    lr, decay = float(ocfg["lr"]), float(ocfg.get("weight_decay", 0.0))
    if ocfg.get("name", "adamw") == "sgd":
        return torch.optim.SGD(
            params, lr=lr, momentum=float(ocfg.get("momentum", 0.0)), weight_decay=decay
        )
    return torch.optim.AdamW(
        params, lr=lr, betas=tuple(ocfg.get("betas", (0.9, 0.95))), weight_decay=decay
    )


def train(
    spec: JobSpec,
    cfg: Mapping[str, Any],
    ctx: DistContext,
    run_dir: Path,
    stop: StopRequest | None = None,
) -> TrainResult:
    tcfg, ocfg, ccfg = cfg["train"], cfg["optim"], cfg.get("checkpoint") or {}
    seed = int(tcfg.get("seed", 0))
    steps = int(tcfg["steps"])

    # Same seed on every rank: every rank builds the same initial model, whatever the
    # mode, before it is wrapped, sharded or split.
    seed_everything(seed)
    dataset = instantiate(cfg["data"])
    model = instantiate(cfg["model"])
    model.activation_checkpointing = bool(tcfg.get("activation_checkpointing", False))
    precision = resolve_precision(spec.precision, ctx.device)
    strategy = build_strategy(spec, cfg, ctx, model, precision)

    optimizer = build_optimizer(strategy.parameters(), ocfg)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lr_lambda(
            int(ocfg.get("warmup_steps", 0)) or 1, steps, float(ocfg.get("min_lr_ratio", 0.1))
        ),
    )

    # ---- resume: the newest complete checkpoint of this run directory -------------------
    lay = spec.layout
    world = {
        "mode": lay.mode,
        "world_size": lay.world_size,
        "pp_size": lay.pp_size,
        "dp_size": lay.dp_size,
        "stages_per_rank": lay.stages_per_rank if lay.schedule == "interleaved_1f1b" else 1,
    }
    ckpt = Checkpointer(
        run_dir,
        strategy.state_module(),
        optimizer,
        ctx.info.rank,
        world,
        cfg,
        ctx.device,
        keep_last=int(ccfg.get("keep_last", 3)),
        use_async=bool(ccfg.get("async", False)),
    )
    start_step, loss_value = 0, None
    folder = ckpt.find(str(cfg.get("resume", "auto")))
    if folder is not None:
        ckpt.check_compatible(folder, bool(ccfg.get("allow_config_change", False)))
        state = ckpt.load(folder)
        scheduler.load_state_dict(state.scheduler)
        if strategy.scaler is not None and state.scaler:
            strategy.scaler.load_state_dict(state.scaler)
        start_step, loss_value = state.step, state.last_loss
        if ctx.is_main:
            print(f"resumed from {folder} (step {start_step})", flush=True)

    # Hold out the end of the dataset for evaluation; train on the rest.
    eval_count = int(len(dataset) * float(tcfg.get("eval_fraction", 0.05)))
    plan = GlobalBatchPlan(
        dataset_size=len(dataset) - eval_count,
        global_batch=spec.global_batch_size,
        micro_batch=spec.micro_batch_size,
        dp_size=lay.dp_size,
        dp_rank=ctx.dp_rank,
        seed=seed,
    )
    eval_rounds = _eval_rounds(
        dataset, plan, eval_count, spec, ctx, int(tcfg.get("eval_batches", 2))
    )
    grad_clip = float(ocfg.get("grad_clip", 0.0) or 0.0)
    log_every = max(1, int(tcfg.get("log_every", 10)))
    eval_every = int(tcfg.get("eval_every", 0) or 0)
    every_steps = int(ccfg.get("every_steps") or 0)
    every_seconds = float(ccfg.get("every_minutes") or 0) * 60
    flops = getattr(model, "flops_per_sample", lambda: 0.0)()
    peak = peak_flops(torch.cuda.get_device_name(ctx.device)) if ctx.device.type == "cuda" else None
    metrics = MetricsWriter(run_dir, ctx.is_main, steps, resume_step=start_step)
    own_stop = stop is None
    stop = stop or StopRequest()

    def to_device(batch: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        return batch[0].to(ctx.device, non_blocking=True), batch[1].to(
            ctx.device, non_blocking=True
        )

    def save(done: int, force_sync: bool = False) -> None:
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

    strategy.train(True)
    if 0 < start_step < steps:
        first = plan.step_indices(start_step)[0]
        strategy.before_resumed_steps(to_device(dataset.batch(first)))
    window_start, window_steps = time.perf_counter(), 0
    last_save_time, saved_at = time.monotonic(), start_step
    stopped_by = ""
    for step in range(start_step, steps):
        batches = [to_device(dataset.batch(idx)) for idx in plan.step_indices(step)]
        local_loss = strategy.train_step(batches)
        if strategy.scaler is not None:
            strategy.scaler.unscale_(optimizer)
        if grad_clip > 0:
            strategy.clip_grad_norm(grad_clip)
        ckpt.before_update()  # an asynchronous save may still be copying the weights
        if strategy.scaler is not None:
            strategy.scaler.step(optimizer)
            strategy.scaler.update()
        else:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        scheduler.step()
        window_steps += 1

        done = step + 1
        if done % log_every == 0 or done == steps:
            # One all-reduce of the loss per logged step, not per step.
            loss_value = strategy.global_mean(local_loss)
            if ctx.device.type == "cuda":
                torch.cuda.synchronize(ctx.device)
            elapsed = (time.perf_counter() - window_start) / window_steps
            record: dict[str, Any] = {
                "step": done,
                "loss": loss_value,
                "lr": scheduler.get_last_lr()[0],
                "step_time_s": elapsed,
                "samples_per_s": spec.global_batch_size / elapsed,
            }
            tokens = getattr(dataset, "tokens_per_sample", 0)
            if tokens:
                record["tokens_per_s"] = spec.global_batch_size * tokens / elapsed
            if peak and flops:
                record["mfu"] = flops * spec.global_batch_size / elapsed / (peak * lay.world_size)
            if eval_every and (done % eval_every == 0 or done == steps):
                strategy.train(False)
                losses = [strategy.eval_loss(batches) for batches in eval_rounds]
                strategy.train(True)
                if eval_rounds:
                    local = torch.stack(
                        [
                            loss if loss is not None else torch.zeros((), device=ctx.device)
                            for loss in losses
                        ]
                    )
                    record["eval_loss"] = strategy.global_mean(local.mean())
            metrics.log(record)
            window_start, window_steps = time.perf_counter(), 0

        # ---- step boundary: stop, save, or go on; every rank decides the same ----------
        time_due = int(
            ctx.is_main and every_seconds > 0 and time.monotonic() - last_save_time >= every_seconds
        )
        signum, time_due = agree([stop.signum, time_due], ctx.device)
        if signum:
            stopped_by = signal_name(signum)
            save(done, force_sync=True)
            saved_at = done
            if ctx.is_main:
                print(f"{stopped_by} received: saved step-{done} and stopping", flush=True)
            break
        if (every_steps and done % every_steps == 0) or time_due or done == steps:
            save(done, force_sync=done == steps)
            saved_at, last_save_time = done, time.monotonic()

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


def _eval_rounds(
    dataset, plan: GlobalBatchPlan, eval_count: int, spec: JobSpec, ctx: DistContext, rounds: int
) -> list[list[tuple[torch.Tensor, torch.Tensor]]]:
    """Held-out global batches, each split across ranks exactly like a training step.

    The eval set is the first `rounds` global batches after the training samples, so it
    is the same whatever the world size, and a pipeline evaluates it step by step.
    """
    g, m, dp = spec.global_batch_size, spec.micro_batch_size, spec.layout.dp_size
    out = []
    for r in range(min(rounds, eval_count // g)):
        first = plan.dataset_size + r * g
        micro = []
        for a in range(spec.grad_accum_steps):
            start = first + a * dp * m + ctx.dp_rank * m
            x, y = dataset.batch(np.arange(start, start + m))
            micro.append((x.to(ctx.device), y.to(ctx.device)))
        out.append(micro)
    return out
