"""The training loop: read top to bottom, one optimizer step per iteration.

Receives values (the JobSpec and the process-group context); reads no environment.
The global batch is the same whatever the world size: each step, every data-parallel
rank runs `grad_accum_steps` micro-batches of `micro_batch_size` samples (see
runtime/sampler.py), read by torch's DataLoader (train/loader.py), and the strategy averages
gradients across ranks. `train` prepares an attempt (components from train/components.py,
resume, the loader), runs its steps, then seals the last save.
"""

from __future__ import annotations

import contextlib
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from jeanzay_kit.ckpt.checkpointer import Checkpointer
from jeanzay_kit.ckpt.trainer_state import TrainerState
from jeanzay_kit.config.spec import JobSpec
from jeanzay_kit.distributed.process_group import DistContext
from jeanzay_kit.errors import CheckpointWriteError, CompileError, NonFiniteLoss
from jeanzay_kit.rundir.run_directory import RunDir
from jeanzay_kit.runtime import startup
from jeanzay_kit.runtime.batch_sampler import PlanBatchSampler
from jeanzay_kit.runtime.compile_cache import CompileCache, cache_counts, open_cache
from jeanzay_kit.runtime.metrics import MetricsWriter
from jeanzay_kit.runtime.peaks import peak_flops
from jeanzay_kit.runtime.sampler import GlobalBatchPlan, StreamPlan, held_out, plan_for
from jeanzay_kit.train import components as build
from jeanzay_kit.train import micro_batch
from jeanzay_kit.train.evaluate import Evaluator, eval_indices
from jeanzay_kit.train.gpu_settings import apply_tf32, compile_wanted
from jeanzay_kit.train.loader import (
    StepBatches,
    build_loader,
    describe_loader,
    workers_here,
)
from jeanzay_kit.train.parts import Parts, for_training
from jeanzay_kit.train.strategies.base import Strategy
from jeanzay_kit.train.stream import StreamBatches, is_stream, open_stream

if TYPE_CHECKING:
    from jeanzay_kit.runtime.run import Run


@dataclass
class TrainResult:
    steps: int  # the last step saved
    final_loss: float | None
    digest: str | None  # of the full model, on rank 0, when training finished
    stopped_by: str = ""  # the signal that stopped training early ("" if it finished)


@dataclass
class Attempt:
    """What one attempt trains with, and where it stands: the loop's whole state."""

    spec: JobSpec
    run: Run  # the runtime (runtime/run.py): agreement, heartbeats, metrics, checkpoints
    ctx: DistContext
    run_dir: RunDir
    hb: Any  # the run's heartbeat: the phase a watchdog reports if this rank stalls
    strategy: Strategy
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    ckpt: Checkpointer
    plan: GlobalBatchPlan | StreamPlan
    batches: StepBatches  # or StreamBatches (train/stream.py)
    evaluator: Evaluator | None  # None: no evaluation (eval.every_steps=0, or no samples)
    metrics: MetricsWriter  # the run's writer
    start_step: int
    loss_value: float | None
    flops: float = 0.0  # training FLOPs per sample (the model's flops_per_sample)
    peak: float | None = None  # the GPU's peak FLOP/s, for MFU
    tokens: int = 0  # the dataset's tokens_per_sample
    compiled: bool = False  # torch.compile: the attempt's first step compiles, timed apart
    compile_s: float | None = None  # that first step's time, in the next logged record
    compile_cache: CompileCache | None = None  # the run's kept compiler caches (compiled)
    first_record: dict[str, Any] = field(default_factory=dict)  # start-up, compile: next log
    blocked_s: float = 0.0  # seconds saves held training up since the last logged record
    saved_at: int = 0
    last_save_time: float = field(default_factory=time.monotonic)
    window_start: float = field(default_factory=time.perf_counter)
    window_cpu: float = field(default_factory=time.process_time)  # this process's CPU time
    window_steps: int = 0
    window_wait: float = 0.0  # seconds the loop waited for batches in this window
    windows_logged: int = 0
    last_eval: dict[str, float] = field(default_factory=dict)  # the newest evaluation, its step
    stopped_by: str = ""


def train(
    spec: JobSpec,
    run: Run,
    allocation_end: float | None = None,
    parts: Parts | None = None,
) -> TrainResult:
    """Train to spec.train.steps, resuming from the newest checkpoint; stop early (with a
    save) when a rank notes a signal. run: the started runtime of this rank
    (Run.from_spec: the group and its mesh, the stop request, heartbeats, metrics),
    which the loop uses directly (a user's loop meets the same Run through Session, its
    documented face: docs/your-own-loop.md). allocation_end:
    when the Slurm allocation ends (epoch seconds), for the time left in the progress
    lines. parts: the dataset, model and loss rank 0's start-of-run check tried (None:
    built here)."""
    attempt = prepare(spec, run, allocation_end, parts)
    try:
        run_steps(attempt)
    finally:
        attempt.batches.close()  # the loader's workers go now, before the last save's wait
    ending = time.perf_counter()
    with _on_write_error(spec.checkpoint.on_write_error, attempt.ctx.is_main):
        attempt.ckpt.close()
    if attempt.compile_cache is not None:  # later compiles (evaluation's) kept too
        attempt.compile_cache.keep(attempt.ctx.is_main)
    digest = None if attempt.stopped_by else save_final_model(attempt)
    # The allocation still runs while the last save finishes, the caches and the final
    # weights are written: the ledger's checkpoint time, not idle (launch/ledger.py).
    attempt.blocked_s += time.perf_counter() - ending
    if attempt.ctx.is_main:
        startup.write_end(attempt.run_dir, attempt.saved_at, attempt.blocked_s)
    run.close_metrics()
    return TrainResult(attempt.saved_at, attempt.loss_value, digest, attempt.stopped_by)


def prepare(
    spec: JobSpec, run: Run, allocation_end: float | None, parts: Parts | None = None
) -> Attempt:
    """Build (data, model, loss, unless the check built them; strategy, optimizer,
    checkpointer), resume, and open the loader at the resumed step."""
    assert run.ctx is not None, "Run.from_spec(...).start() first"
    ctx, run_dir = run.ctx, run.run_dir
    tset = spec.train
    apply_tf32(tset.tf32, ctx.device)
    cache = _compile_cache(spec, ctx, run_dir)  # before anything compiles
    # Same seed on every rank: every rank builds the same initial model, whatever the
    # mode, before it is wrapped, sharded or split (train/parts.py).
    parts = for_training(parts, spec, warn=ctx.is_main)
    dataset, model, compute_loss = parts.dataset, parts.model, parts.compute_loss
    precision = build.resolve_precision(tset.precision, ctx.device)
    spec = micro_batch.settle(
        spec,
        is_main=ctx.is_main,
        device=ctx.device,
        model=model,
        compute_loss=compute_loss,
        autocast=build.make_autocast(precision, ctx.device),
        dataset=dataset,
        run_dir=run_dir,
    )
    strategy = build.build_strategy(spec, ctx, model, compute_loss, precision)
    optimizer = build.build_optimizer(strategy.parameters(), spec.optim, ctx.device)
    scheduler = build.build_scheduler(optimizer, spec.optim, tset.steps)
    startup.clock().mark("model_build")
    ckpt = build.build_checkpointer(spec, strategy, optimizer, run)
    resumed, folder = resume(spec, run, ckpt, scheduler, strategy)
    plan, batches = open_data(spec, ctx, dataset, ckpt, resumed, folder)
    startup.clock().mark("loader")
    return Attempt(
        spec=spec,
        run=run,
        ctx=ctx,
        run_dir=run_dir,
        hb=run.heartbeat,
        strategy=strategy,
        optimizer=optimizer,
        scheduler=scheduler,
        ckpt=ckpt,
        plan=plan,
        batches=batches,
        evaluator=_evaluator(spec, ctx, dataset, compute_loss),
        metrics=run.metrics_writer(
            allocation_end, describe_loader(spec, batches.loader.num_workers)
        ),
        start_step=resumed.step,
        loss_value=resumed.last_loss,
        flops=flops_per_sample(model, dataset),
        peak=peak_flops(torch.cuda.get_device_name(ctx.device), precision, tset.tf32)
        if ctx.device.type == "cuda"
        else None,
        compiled=cache is not None,
        compile_cache=cache,
        tokens=getattr(dataset, "tokens_per_sample", 0) or 0,
        saved_at=resumed.step,
    )


def _compile_cache(spec: JobSpec, ctx: DistContext, run_dir: RunDir) -> CompileCache | None:
    """Where train.compile applies: the run's kept compiler caches, opened before the
    first compile (runtime/compile_cache.py: a requeue on any node starts warm)."""
    if not compile_wanted(spec.train.compile, ctx.device, spec.layout.mode):
        return None
    return open_cache(run_dir, ctx.device.type)


def flops_per_sample(model: Any, dataset: Any) -> float:
    """Training FLOPs of one sample, as the model states them (contracts.CountsFlops):
    flops_per_sample(), or flops_per_token() times the dataset's tokens_per_sample; 0.0
    (no MFU column) when it states neither."""
    if callable(getattr(model, "flops_per_sample", None)):
        return float(model.flops_per_sample())
    tokens = getattr(dataset, "tokens_per_sample", 0) or 0
    if callable(getattr(model, "flops_per_token", None)) and tokens:
        return float(model.flops_per_token()) * tokens
    return 0.0


def open_data(
    spec: JobSpec,
    ctx: DistContext,
    dataset: Any,
    ckpt: Checkpointer,
    resumed: TrainerState,
    folder: Path | None,
) -> tuple[GlobalBatchPlan | StreamPlan, StepBatches]:
    """This rank's batches from the resumed step on, and the plan that counts them."""
    tset = spec.train
    if is_stream(dataset):
        # Each rank reads its own share of the stream, from where its checkpoint left it.
        stream_plan = StreamPlan(
            tset.global_batch_size,
            tset.micro_batch_size,
            spec.layout.dp_size,
            resumed.step,
            resumed.sample_position,
        )
        return stream_plan, open_stream(spec, ctx, dataset, stream_plan, ckpt, folder)
    # The end of the dataset is held out for evaluation; the plan trains on the rest, from
    # the checkpoint's global sample index (valid whatever the world size it was saved on,
    # so no sample of the epoch is seen twice or skipped).
    plan = plan_for(spec, ctx.dp_rank, len(dataset), resumed.step, resumed.sample_position)
    return plan, open_batches(spec, ctx, dataset, plan, resumed.step)


def _note_nothing_left(run_dir: RunDir, step: int, steps: int) -> None:
    print(
        f"note: the run directory {run_dir} already holds step {step} "
        f"(train.steps={steps}): nothing left to train. HINT: raise train.steps to "
        "train on; for a fresh run use another job.name (a new run directory) or "
        "resume=never",
        file=sys.stderr,
        flush=True,
    )


def open_batches(
    spec: JobSpec, ctx: DistContext, dataset: Any, plan: GlobalBatchPlan, start_step: int
) -> StepBatches:
    """torch's DataLoader over this rank's micro-batches from `start_step` on."""
    loader_set = spec.loader
    workers = workers_here(loader_set)
    sampler = PlanBatchSampler(plan, start_step, spec.train.steps)
    loader = build_loader(
        dataset,
        sampler,
        loader_set,
        workers=workers,
        device_type=ctx.device.type,
        seed=spec.train.seed,
        per_step=plan.accumulation_steps,
    )
    return StepBatches(loader, plan.accumulation_steps, ctx.device, describe_loader(spec, workers))


def resume(
    spec: JobSpec,
    run: Run,
    ckpt: Checkpointer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    strategy: Strategy,
) -> tuple[TrainerState, Path | None]:
    """The run's one resume (checkpoint.resume names the checkpoint), then what only
    this loop saves: the LR scheduler and the loss scaler."""
    state, folder = run.resume_from(
        ckpt, spec.checkpoint.resume, spec.checkpoint.allow_config_change
    )
    if folder is not None:
        scheduler.load_state_dict(state.scheduler)
        if strategy.scaler is not None and state.scaler:
            strategy.scaler.load_state_dict(state.scaler)
    startup.clock().mark("checkpoint_load")
    if state.step >= spec.train.steps and run.info.rank == 0:
        _note_nothing_left(run.run_dir, state.step, spec.train.steps)
    return state, folder


# ---- the loop ---------------------------------------------------------------------------


def run_steps(a: Attempt) -> None:
    """Every step from the resumed one to train.steps, or until a signal stops them."""
    a.strategy.train(True)
    a.window_start, a.window_steps, a.window_cpu = time.perf_counter(), 0, time.process_time()
    for step in range(a.start_step, a.spec.train.steps):
        a.hb.beat(step, "data")
        # How long the loop waits for its batches (host time: no device sync is added).
        waited = time.perf_counter()
        batches = a.batches.next_step()
        a.window_wait += time.perf_counter() - waited
        if step == a.start_step:
            startup.clock().mark("first_batch")
        if step == a.start_step > 0:
            a.strategy.before_resumed_steps(batches[0])
        a.hb.beat(step, "forward_backward")
        local_loss = compiled_step(a, batches) if a.compiled else a.strategy.train_step(batches)
        a.hb.beat(step, "optimizer")
        stop, time_due = optimizer_step(a, step, local_loss)
        if a.compiled and step == a.start_step:
            note_compile_time(a)  # the compiling step is not in any step time or ETA
        else:
            a.window_steps += 1
        if step == a.start_step:
            note_start(a)
        a.metrics.advance(step + 1)
        done = step + 1
        if done % a.spec.train.log_every == 0 or done == a.spec.train.steps or eval_due(a, done):
            log_step(a, done, local_loss)
        # ---- step boundary: stop, save, or go on; every rank decides the same ----------
        a.hb.beat(done, "step_boundary")
        if at_boundary(a, done, stop, time_due):
            break


def optimizer_step(a: Attempt, step: int, local_loss: torch.Tensor) -> tuple[bool, bool]:
    """Clip, agree with the other ranks, then apply the update (or not): returns the
    agreed (stop, save due by time)."""
    strategy, optimizer = a.strategy, a.optimizer
    if strategy.scaler is not None:
        strategy.scaler.unscale_(optimizer)
    if a.spec.optim.grad_clip > 0:
        strategy.clip_grad_norm(a.spec.optim.grad_clip)
    # One collective per step, before the update, so every rank decides alike: a
    # signal, a save due by rank 0's clock, and whether any rank's loss is NaN or
    # infinite (a flag on the device: no sync of its own).
    every_seconds = (a.spec.checkpoint.every_minutes or 0) * 60
    time_due = (
        a.ctx.is_main and every_seconds > 0 and time.monotonic() - a.last_save_time >= every_seconds
    )
    verdict = a.run.agree_before_update(local_loss, time_due)
    if verdict.nonfinite:
        _on_nonfinite(a.spec.train.nonfinite, step + 1, a.ckpt, a.ctx.is_main)
    else:
        a.ckpt.before_update()  # an asynchronous save may still be copying the weights
        if strategy.scaler is not None:
            strategy.scaler.step(optimizer)
            strategy.scaler.update()
        else:
            optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    a.scheduler.step()
    return verdict.stop, verdict.save_due


def compiled_step(a: Attempt, batches: list[Any]) -> torch.Tensor:
    """A step of a compiled model: a failure of torch.compile itself (its compiler, a
    model it cannot trace) is one line naming train.compile, not a page of traceback on
    every rank and a restart that would fail the same way."""
    try:
        return a.strategy.train_step(batches)
    except Exception as err:
        from torch._dynamo.exc import TorchDynamoException

        if not isinstance(err, TorchDynamoException):
            raise
        lines = [line.strip() for line in str(err).splitlines() if line.strip()]
        why = lines[0][:300] if lines else type(err).__name__
        raise CompileError(
            f"train.compile={'auto' if a.spec.train.compile is None else 'true'}: "
            f"torch.compile failed on the model: {why}. HINT: train.compile=false runs it "
            "eager (and shows the model's own error, if it is one)"
        ) from None


def note_compile_time(a: Attempt) -> None:
    """torch.compile compiles during the attempt's first step: time it apart, say it, and
    start the step-time window after it."""
    if a.ctx.device.type == "cuda":
        torch.cuda.synchronize(a.ctx.device)
    a.compile_s = time.perf_counter() - a.window_start
    if a.ctx.is_main:
        print(
            f"torch.compile: the first step took {a.compile_s:.1f} s (compiling, loader start "
            "included); step times and the ETA count from the next step",
            flush=True,
        )
    a.window_start, a.window_wait, a.window_cpu = time.perf_counter(), 0.0, time.process_time()
    if a.compile_cache is not None:
        hits, misses = cache_counts()
        a.first_record.update(
            compile_cache="warm" if a.compile_cache.warm else "cold",
            compile_hits=hits,
            compile_misses=misses,
        )
        a.compile_cache.keep(a.ctx.is_main)  # what a requeue of this run starts from


def note_start(a: Attempt) -> None:
    """The attempt's first step is done: its start-up in parts, in starts.jsonl (rank 0)
    and the next metrics record."""
    clock = startup.clock()
    clock.mark("compile" if a.compiled else "first_step")
    a.first_record.update(clock.record())
    if a.ctx.is_main:
        startup.write_start(
            a.run_dir,
            {
                "start_step": a.start_step,
                "reached_before": clock.reached,
                "compiled": a.compiled,
                **{k: v for k, v in a.first_record.items() if k.startswith("compile_")},
            },
        )


def log_step(a: Attempt, done: int, local_loss: torch.Tensor) -> None:
    """One all-reduce of the loss per logged step, not per step; the throughput of the
    steps since the last line; the held-out loss when due."""
    tset = a.spec.train
    a.loss_value = a.strategy.global_mean(local_loss)
    if a.ctx.device.type == "cuda":
        torch.cuda.synchronize(a.ctx.device)
    steps = max(1, a.window_steps)
    if a.window_steps:
        elapsed = (time.perf_counter() - a.window_start) / a.window_steps
    else:  # the compiling step alone in its window (train.log_every=1)
        elapsed = a.compile_s or time.perf_counter() - a.window_start
    record: dict[str, Any] = {
        "step": done,
        "loss": a.loss_value,
        "lr": a.scheduler.get_last_lr()[0],
        "step_time_s": elapsed,
        "samples_per_s": tset.global_batch_size / elapsed,
        "data_wait_s": a.window_wait / steps,
        "data_wait_share": min(1.0, a.window_wait / steps / elapsed),
        # CPU seconds of this rank's process per step (all its threads): what a busy
        # neighbour on the node moves less than the wall time (bench/bench_runtime.py).
        "step_cpu_s": (time.process_time() - a.window_cpu) / steps,
    }
    if a.compile_s is not None:
        record["compile_s"], a.compile_s = a.compile_s, None
    record.update(a.first_record, ckpt_block_s=a.blocked_s)
    a.first_record, a.blocked_s = {}, 0.0
    if a.tokens:
        record["tokens_per_s"] = tset.global_batch_size * a.tokens / elapsed
    if a.peak and a.flops:
        world = a.spec.layout.world_size
        record["mfu"] = a.flops * tset.global_batch_size / elapsed / (a.peak * world)
    if eval_due(a, done):
        a.hb.beat(done, "eval")
        a.strategy.agree_buffers()
        assert a.evaluator is not None  # eval_due says so
        a.last_eval = {"step": done, **a.evaluator.run(a.strategy)}
        record.update({k: v for k, v in a.last_eval.items() if k != "step"})
    # An attempt's first window holds the loader workers' start: not judged input-bound.
    a.metrics.log(record, judge_input=a.windows_logged > 0, eta=a.window_steps > 0)
    a.window_start, a.window_steps, a.window_wait = time.perf_counter(), 0, 0.0
    a.window_cpu = time.process_time()
    a.windows_logged += 1


def eval_due(a: Attempt, done: int) -> bool:
    """Every eval.every_steps steps, and at the last one (a logged step either way)."""
    every = a.spec.eval.every_steps
    return (
        a.evaluator is not None
        and bool(every)
        and (done % every == 0 or done == a.spec.train.steps)
    )


def at_boundary(a: Attempt, done: int, stop: bool, time_due: bool) -> bool:
    """Save when a signal, the schedule or the end asks; True: stop here."""
    cset = a.spec.checkpoint
    if stop:
        a.stopped_by = a.run.stopped_by
        save(a, done, force_sync=True)
        a.saved_at = done
        if a.ctx.is_main:
            print(f"{a.stopped_by} received: saved step-{done} and stopping", flush=True)
        return True
    if (
        (cset.every_steps and done % cset.every_steps == 0)
        or time_due
        or done == a.spec.train.steps
    ):
        save(a, done, force_sync=done == a.spec.train.steps)
        a.saved_at, a.last_save_time = done, time.monotonic()
    return False


def save(a: Attempt, done: int, force_sync: bool = False) -> None:
    a.hb.beat(done, "checkpoint")
    a.strategy.agree_buffers()  # one copy of replicated buffers to save
    with _on_write_error(a.spec.checkpoint.on_write_error, a.ctx.is_main):
        a.ckpt.save(
            done,
            TrainerState(
                done,
                a.plan.sample_position(done),
                a.scheduler.state_dict(),
                a.strategy.scaler.state_dict() if a.strategy.scaler else None,
                a.loss_value,
            ),
            force_sync=force_sync,
            evaluated=a.last_eval if a.last_eval.get("step") == done else None,
            data_state=a.batches.state_dict() if isinstance(a.batches, StreamBatches) else None,
        )
    a.blocked_s += a.ckpt.last_blocking_s  # the ledger's checkpoint time (launch/ledger.py)


def save_final_model(a: Attempt) -> str | None:
    """The finished model's weights on rank 0 (model_final.pt) and their digest, as
    every loop saves them (s.save_model), from the strategy's gathered state."""
    digest = a.run.save_model(a.strategy.full_state_dict())  # model_final.pt
    return digest if a.ctx.is_main else None


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


def _evaluator(
    spec: JobSpec, ctx: DistContext, dataset: Any, compute_loss: Any
) -> Evaluator | None:
    """eval.data, or the held-out end of the training data; None (said once) when there is
    nothing to evaluate."""
    if not spec.eval.every_steps:
        return None
    own = build.build_eval_dataset(spec)
    if own is not None:
        data, indices = own, eval_indices(spec, len(own))
    elif is_stream(dataset):
        if ctx.is_main:
            print(
                f"note: no evaluation: data._target_={spec.data.get('_target_')} is a stream, "
                "with no end to hold out. HINT: give a validation set (eval.data), or "
                "eval.every_steps=0 to say so",
                flush=True,
            )
        return None
    else:
        held = held_out(spec, len(dataset))
        data, indices = dataset, eval_indices(spec, held, first=len(dataset) - held)
    if len(indices) == 0:
        if ctx.is_main:
            print(
                f"note: no evaluation: train.eval_fraction={spec.train.eval_fraction} of "
                f"{len(dataset)} samples holds none out. HINT: give a validation set "
                "(eval.data), raise train.eval_fraction, or eval.every_steps=0 to say so",
                flush=True,
            )
        return None
    metrics = build.build_metrics(spec, ctx.device)
    return Evaluator(spec, ctx, data, indices, compute_loss, metrics)
