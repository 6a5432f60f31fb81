"""Your own training loop with the toolkit's runtime: `from jeanzay_kit import session`.

    with session(steps=steps) as s:           # ranks, device, process group
        model = s.wrap(model)                 # DDP (FSDP2 with fsdp=True)
        sampler = s.sampler(dataset, batch_size=32)
        ckpt = s.checkpointer(model, optimizer, extra={"scheduler": scheduler})
        for step in range(ckpt.resume(), steps):
            ...your step...
            if s.should_stop(step, loss=loss):   # one collective: a signal, a NaN
                ckpt.save(step + 1)
                s.requeue_and_exit()

The session reads the launcher's variables once, when it starts (srun, torchrun, a
script task of `jzk train`/`jzk submit`, or none: one process), and hands the loop what
the toolkit's own loop uses: the process group (distributed/process_group.py), the
global-batch plan (runtime/sampler.py) as a torch batch sampler, the checkpointer
(ckpt/checkpointer.py: atomic, verified, resharded on another world size), heartbeats and
the hang watchdog (runtime/heartbeat.py), metrics.jsonl and progress lines
(runtime/metrics.py), and the same end after a signal (ending/requeue.py after_stop).
docs/your-own-loop.md walks a plain script through it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any, Literal, NoReturn

import torch
import torch.distributed as dist
from torch import nn

from jeanzay_kit import report
from jeanzay_kit.ckpt.checkpointer import Checkpointer
from jeanzay_kit.ckpt.trainer_state import TrainerState
from jeanzay_kit.config.runtime_settings import RuntimeSettings, changed, resolve
from jeanzay_kit.config.runtime_settings import check as check_settings
from jeanzay_kit.config.runtime_settings import from_env as settings_from_env
from jeanzay_kit.contracts import MapDataset
from jeanzay_kit.distributed.process_group import DistContext
from jeanzay_kit.distributed.ranks import RankInfo, rank_info_from_env
from jeanzay_kit.ending.preemption import StopRequest
from jeanzay_kit.ending.requeue import under_script_task
from jeanzay_kit.errors import JzkError
from jeanzay_kit.rundir.run_directory import RunDir
from jeanzay_kit.runtime import session_rules as rules
from jeanzay_kit.runtime.plan_sampler import PlanSampler
from jeanzay_kit.runtime.run import Ending, Run, StepVerdict
from jeanzay_kit.runtime.run_result import direction_of
from jeanzay_kit.runtime.session_checkpointer import SessionCheckpointer

__all__ = ["PlanSampler", "Session", "SessionCheckpointer", "StepVerdict", "session"]

# Session's keyword arguments that are runtime settings (config/runtime_settings.py).
_SETTING_NAMES = frozenset(f.name for f in fields(RuntimeSettings))


class Session:
    """The runtime of a loop you wrote. Use it as a context manager (`with session() as
    s:`); every rank runs the same calls in the same order (several are collectives).

    steps: how many steps the run makes (progress lines and ETA; None: unknown).
    run_dir: where checkpoints, metrics.jsonl and heartbeats go (default: JZK_RUN_DIR
    under `jzk train`/`jzk submit` and `hydra/launcher=jeanzay`, else the output
    directory of the sweep point (`-m`) of the `@hydra.main` function calling it, else
    outputs/session).

    The other settings default to the job's config under `jzk train|submit
    job.entry=your_script.py` (the key in brackets), else to that key's shipped default
    (config/runtime_settings.py); a value given here wins over both.
    device: auto | cpu | cuda [cluster.device]. backend: auto (NCCL on GPUs, gloo on the
    CPU) | nccl | gloo [parallel.backend]. timeout_minutes: a collective waiting this
    long fails the run [parallel.timeout_minutes]. keep_last: complete checkpoints kept
    [checkpoint.keep_last]. checkpoint_dir: a folder on a fast tier for the checkpoints,
    the newest and best copied back to <run_dir>/kept at the end [checkpoint.dir].
    stall_seconds: a rank without progress this long is named by
    the watchdog and the run stops, 0: off [watchdog.stall_seconds]. heartbeat_seconds
    [watchdog.heartbeat_seconds]. requeue: after a stop by the time-limit signal, requeue
    the job under plain srun; a script task of the toolkit is requeued by its wrapper
    [preemption.requeue]. requeue_signal: which signal is the time-limit warning
    [preemption.signal; in a job of hydra-submitit-launcher or submitit, submitit's own,
    $SUBMITIT_PREEMPT_SIGNAL, USR2 by default: config/runtime_settings.py job_signal].
    term_wait_seconds: after a SIGTERM save, how long to wait for Slurm to end the job
    [preemption.term_wait_seconds]. objective: the name of the
    run's value in result.json, what a search optimizes (s.report) [tune.objective];
    direction: minimize | maximize | auto [tune.direction]. env: the environment to read
    (default os.environ, read once here).
    """

    def __init__(
        self,
        steps: int | None = None,
        run_dir: str | os.PathLike[str] | None = None,
        *,
        device: str | None = None,
        backend: str | None = None,
        timeout_minutes: float | None = None,
        keep_last: int | None = None,
        checkpoint_dir: str | None = None,
        stall_seconds: float | None = None,
        heartbeat_seconds: float | None = None,
        requeue: bool | None = None,
        requeue_signal: str | None = None,
        term_wait_seconds: float | None = None,
        objective: str | None = None,
        direction: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        # Signals are noted from the very start, never fatal (ending/preemption.py).
        stop = StopRequest()
        env = dict(os.environ if env is None else env)  # the one read
        # The keyword arguments above that are settings; None: not given.
        given = {k: v for k, v in locals().items() if k in _SETTING_NAMES}
        try:
            settings = resolve(settings_from_env(env), given)
            check_settings(settings)
        except JzkError as err:  # keep_last=0, a foreign JZK_SESSION_SETTINGS: one line
            report.error("session", err)
            raise SystemExit(err.exit_code) from None
        objective_name = settings.objective
        self.run = Run(
            settings,
            rank_info_from_env(env),
            RunDir.of(
                rules.run_dir_for(os.fspath(run_dir) if run_dir else None, env, _hydra_dir())
            ),
            steps,
            stop,
            env,
            Ending((objective_name,), (direction_of(objective_name, settings.direction),)),
        )
        # A loop run on its own (not a job.entry script, whose wrapper holds it; not
        # the toolkit's loop, whose entry point does) holds its run directory itself.
        self.run.holds_lease = self.is_main and not under_script_task(env)
        # What started the ranks, as the first line says it: a job.entry task passes
        # torchrun's variables to its script, which then reads as torchrun's worker.
        self._started_by = "job.entry task" if under_script_task(env) else self.run.info.launcher

    # ---- where this process sits ---------------------------------------------------------

    @property
    def rank(self) -> int:
        return self.run.info.rank

    @property
    def local_rank(self) -> int:
        return self.run.info.local_rank

    @property
    def world_size(self) -> int:
        return self.run.info.world_size

    @property
    def is_main(self) -> bool:
        return self.run.is_main

    @property
    def info(self) -> RankInfo:
        return self.run.info

    @property
    def settings(self) -> RuntimeSettings:
        return self.run.settings

    @property
    def device(self) -> torch.device:
        return self.run.device

    @property
    def ctx(self) -> DistContext | None:
        """The group and the job's device mesh (a run of the toolkit's loop, Run.from_spec;
        None for `with session()`)."""
        return self.run.ctx

    @property
    def run_dir(self) -> Path:
        return self.run.run_dir.root

    @property
    def stopped_by(self) -> str:
        """The signal that stopped the run ("SIGUSR1"...), "" while none has."""
        return self.run.stopped_by

    @property
    def start_step(self) -> int:
        """Where the resume put the run (0 on a fresh start)."""
        return self.run.start_step

    @property
    def heartbeat(self) -> Any:
        """This rank's heartbeat writer (runtime/heartbeat.py): beat(step, phase)."""
        return self.run.heartbeat

    # ---- start and end -------------------------------------------------------------------

    def start(self, before_join: Callable[[torch.device], None] | None = None) -> None:
        """The device, the process group, heartbeats and the watchdog (`with session()`
        does it). before_join(device): what must come first (the toolkit's loop checks the
        user's contracts on rank 0 before any collective)."""
        self.run.start(before_join)

    def close(self, failed: bool = False) -> None:
        """Stop the watchdog and the heartbeats and leave the group (together, after a
        success; at once after a failure). `with session()` does it."""
        self.run.close(failed)

    def __enter__(self) -> Session:
        try:
            self.start()
        except JzkError as err:  # no GPU where device=cuda asks for one, ...: one line
            report.error("session", f"rank {self.rank}: {err}")
            raise SystemExit(err.exit_code) from None
        if self.is_main:
            different = changed(self.settings)
            print(
                f"jzk session: {self.world_size} rank(s) ({self._started_by}), device "
                f"{self.device}, backend {dist.get_backend()}, run dir {self.run_dir}"
                + (f", settings {different}" if different else ""),
                flush=True,
            )
        return self

    def __exit__(self, kind: type | None, err: BaseException | None, _tb: object) -> Literal[False]:
        self.finish(err)
        return False

    def finish(self, err: BaseException | None = None) -> None:
        """The end of the run (`with session()` does it; the toolkit's loop calls it):
        the last step's agreement, leave the group, and rank 0 writes result.json after
        a completed run (not after a signal); an error every rank meets alike (a NaN, a
        changed config) is said once, and the process exits with its code."""
        self.run.end(err)

    def fail(self, caught: BaseException) -> NoReturn:
        """The failure path of a loop without a `with` block (the toolkit's; call it in
        `except BaseException as caught:`): this rank says once why it stops (a refusal
        every rank meets, by rank 0; a rank's own failure with its traceback; a peer's
        loss in one line), leaves the group at once, and exits with a refusal's code or
        raises the error again."""
        self.run.fail(caught)

    # ---- the model -----------------------------------------------------------------------

    def wrap(self, model: nn.Module, fsdp: bool = False, **ddp_options: Any) -> nn.Module:
        """The model on this rank's device, wrapped for data parallelism: DDP (its options,
        e.g. find_unused_parameters=True, pass through), or FSDP2 (`fully_shard` on each
        child that holds parameters, then the root) with fsdp=True. Build the optimizer
        after wrapping: FSDP2 replaces the parameters. One process: the model as is."""
        model = model.to(self.device)
        if fsdp:
            from torch.distributed.fsdp import fully_shard

            self.run.mode = "fsdp"
            for child in model.children():
                if any(p.requires_grad for p in child.parameters()):
                    fully_shard(child)
            fully_shard(model)
            # The parameters' all-gather starts here: a rank that got this far waits for
            # its peers (runtime/stall.py WAITING_PHASES).
            model.register_forward_pre_hook(lambda *_: self._beat_phase("forward"))
            return model
        self.run.mode = "ddp"
        if self.world_size == 1:
            return model
        from torch.nn.parallel import DistributedDataParallel as DDP

        ids = [self.device.index] if self.device.type == "cuda" else None
        ddp = DDP(model, device_ids=ids, **ddp_options)
        # Past its forward a rank computes the backward and then waits in DDP's gradient
        # all-reduce for its peers: the watchdog names a rank still in the user's code
        # first (runtime/stall.py WAITING_PHASES). A forward hook costs one Python call; a
        # comm hook around the all-reduce cost 2 % of the step (an extra pass over the
        # gradient buckets, bench/bench_session.py).
        ddp.register_forward_hook(lambda *_: self._beat_phase("backward"))
        if self.world_size > 2:  # a resume sums gradients as the uninterrupted run does
            from jeanzay_kit.distributed.ddp_buckets import RebuildOnResume

            resumed = RebuildOnResume(lambda: self.run.start_step > 0, self.device)
            ddp.register_forward_pre_hook(resumed, with_kwargs=True)
        return ddp

    def _beat_phase(self, phase: str) -> None:
        self.run.heartbeat.beat(self.run.heartbeat.step, phase)

    def save_model(
        self,
        model: nn.Module | Mapping[str, torch.Tensor] | None,
        name: str = RunDir.final_model_name,
    ) -> str:
        """Collective: the whole model's weights (gathered from FSDP shards, without DDP's
        `module.`) written by rank 0 to <run_dir>/<name>, with their sha256 digest next to
        it (<name without .pt>.sha256). Returns the digest (on every rank). A loop that
        gathers its weights itself (the toolkit's pipelines) passes rank 0's full state
        dict instead of the model (None on the other ranks)."""
        return self.run.save_model(model, name)

    # ---- the data ------------------------------------------------------------------------

    def sampler(
        self,
        dataset: MapDataset,
        batch_size: int,
        *,
        global_batch_size: int | None = None,
        seed: int = 0,
        seed_per_sample: bool = False,
    ) -> PlanSampler:
        """The toolkit's global-batch plan over `dataset` as a `batch_sampler` for torch's
        DataLoader: this rank's micro-batches of batch_size samples, step after step,
        from the step ckpt.resume() returned. Each step trains on global_batch_size
        samples (default batch_size x world size), in an order that depends only on
        seed and the step, not on the world size: a run resumed on another number of
        ranks trains on the same samples (then give global_batch_size, and run
        `sampler.accumulation_steps` micro-batches a step). seed_per_sample: a dataset
        that draws random numbers (augmentation) gets them from (seed, the sample's
        global position), as in the toolkit's loop: read `sampler.dataset` then,
        `DataLoader(sampler.dataset, batch_sampler=sampler)`."""
        if any(ckpt.resumed for ckpt in self.run.checkpointers):
            raise JzkError(
                "s.sampler(...) was called after ckpt.resume(): the resume could not check "
                "the data order, nor start the sampler at the checkpoint's step. HINT: "
                "create the sampler before ckpt.resume()"
            )
        size = len(dataset)
        accumulation = rules.split_global_batch(batch_size, global_batch_size, self.world_size)
        global_batch = batch_size * self.world_size * accumulation
        self.run.data = {"dataset_size": size, "global_batch_size": global_batch, "seed": seed}
        return PlanSampler(
            self.run,
            dataset,
            global_batch,
            batch_size,
            seed=seed,
            accumulation=accumulation,
            seed_per_sample=seed_per_sample,
        )

    # ---- every step ----------------------------------------------------------------------

    def should_stop(self, step: int, loss: torch.Tensor | None = None) -> bool:
        """Collective, at the end of each step: True on every rank when any rank received
        a stop signal (Slurm's time-limit warning, a preemption, scancel). A loss that is
        NaN or infinite on any rank raises NonFiniteLoss on every rank instead (save
        nothing: the newest checkpoint is the last good state).

        The ranks agree with one all-reduce that runs while the next step computes: its
        answer is read at the next call (or by ckpt.save, or at the end of the session),
        so a stop comes one step after the signal, and a NaN is caught before any save.
        Measured in lockstep with a hand-written loop on 2 CPU workers (gloo, a 40 ms
        step): this agreement costs 3.7 % of the CPU time per step, all of the
        session's overhead there, and 5 % of the wall time; waited for at once, 8 %
        (docs/performance.md, issue 59). On a GPU it is one NCCL all-reduce of a few
        integers."""
        return self.run.should_stop(step, loss)

    def agree_before_update(
        self, step: int, loss: torch.Tensor | None = None, *, save_due: bool = False
    ) -> StepVerdict:
        """Collective, after the backward pass of step `step` and before the optimizer
        applies it: every rank learns, now, whether a stop signal arrived, whether any rank
        wants a save, and whether any loss is NaN or infinite, so a loop can drop that
        update (the toolkit's loop: train.nonfinite=skip) or stop before it. The same
        all-reduce as should_stop, waited for at once: it costs a per-step wait that
        should_stop hides, for an answer before the update."""
        return self.run.agree_before_update(loss, save_due)

    def report(self, value: float | torch.Tensor, step: int) -> None:
        """The run's value for a search (settings.objective names it), measured at `step`:
        rank 0's is kept, and written to <run_dir>/result.json when the session ends
        after the run finished (not when a signal stopped it). Without a report, the
        session writes the objective's last value from metrics.jsonl (s.log's records:
        `loss` as train_loss, your eval_* values) (runtime/run_result.py)."""
        number = (
            float(value.detach().float().item())
            if isinstance(value, torch.Tensor)
            else float(value)
        )
        self.run.reported = (number, int(step))

    def requeue_and_exit(self, step: int | None = None) -> None:
        """After ckpt.save(...) of a stopped run: end this process with exit code 3 ("run me
        again"). Under plain srun rank 0 first requeues the job when Slurm's time-limit
        signal stopped it, and after a SIGTERM (a preemption) every rank waits for Slurm
        to end the job; a script task of the toolkit is requeued by its wrapper. step:
        the step saved (default: the newest that s.checkpointer saved or resumed)."""
        self.run.requeue_and_exit(step)

    def log(self, step: int, **values: float | torch.Tensor) -> None:
        """Collective (call it on every rank at the same steps): one line of metrics.jsonl
        and a progress line (rank 0) for `step` (the number of steps done). Tensors are
        averaged over the ranks in one all-reduce; numbers are rank 0's. The step time
        is measured since the previous call."""
        self.run.log(step, values)

    def close_metrics(self) -> None:
        """Close the metrics writer now (the session does at its end); the next
        metrics_writer() call opens a new one, from the step note_resumed gave."""
        self.run.close_metrics()

    def metrics_writer(self, *, end_time: float | None = None, loader: str = "") -> Any:
        """The run's metrics.jsonl and progress lines (runtime/metrics.py MetricsWriter),
        opened at the first call from the resumed step on and closed with the session:
        s.log writes through it, the toolkit's loop writes its richer records through it.
        end_time: when the allocation ends (default: SLURM_JOB_END_TIME); loader: what
        the data is loaded with, for the input-bound note."""
        return self.run.metrics_writer(end_time, loader)

    # ---- checkpoints ---------------------------------------------------------------------

    def checkpointer(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        extra: dict[str, Any] | None = None,
        *,
        config: Mapping[str, Any] | None = None,
        allow_config_change: bool | None = None,
    ) -> SessionCheckpointer:
        """The toolkit's checkpoints of model, optimizer and `extra` in <run_dir>/checkpoints.
        extra: objects with state_dict()/load_state_dict() (an LR scheduler, a GradScaler)
        or plain values (restored into the same dict); config: your hyper-parameters, a
        resume with other values is refused unless allow_config_change (default: the job's
        checkpoint.allow_config_change)."""
        if allow_config_change is None:
            allow_config_change = self.settings.allow_config_change
        ckpt = SessionCheckpointer(self.run, model, optimizer, extra, config, allow_config_change)
        self.run.checkpointers.append(ckpt)
        return ckpt

    def open_checkpointer(
        self,
        module: nn.Module,
        optimizer: torch.optim.Optimizer,
        *,
        world: Mapping[str, Any],
        config: Mapping[str, Any],
        use_async: bool = False,
        keep_best: tuple[str, str] | None = None,
    ) -> Checkpointer:
        """The run's checkpointer (ckpt/checkpointer.py) on this rank, its device and the
        session's keep_last: what s.checkpointer(...) wraps, and what the toolkit's loop
        saves with (its strategy's state module, asynchronous saves, keep_best). world: the
        layout a resume is compared with; config: what a resume must not change."""
        options = {"use_async": use_async, "keep_best": keep_best}
        return self.run.open_checkpointer(module, optimizer, world, config, options)

    def resume_from(
        self, ckpt: Checkpointer, *, which: str = "auto", allow_config_change: bool | None = None
    ) -> tuple[TrainerState, Path | None]:
        """Collective: resume a checkpointer of s.open_checkpointer as s.checkpointer(...)
        .resume() does: the checkpoint `which` names (auto: the newest complete one;
        never; or a step folder) loaded into its module and optimizer after the config and
        layout checks, `resumed from` printed, and the run placed at its step. Returns its
        trainer state (step 0 on a fresh start; restore a scheduler from its `scheduler`)
        and its folder (None on a fresh start)."""
        if allow_config_change is None:
            allow_config_change = self.settings.allow_config_change
        return self.run.resume_from(ckpt, which, allow_config_change)

    def note_resumed(self, step: int, position: int, loss: float | None) -> None:
        """Where the run stands after a resume (ckpt.resume() says it; the toolkit's loop,
        which loads its own checkpoint, too): the step, the global sample index and the
        last loss, so that the sampler, sample_position and the metrics go on from there."""
        self.run.note_resumed(step, position, loss)


# `with session(steps=...) as s:`: the documented spelling, the same class.
session = Session


def _hydra_dir() -> str | None:
    """The output directory of the running `@hydra.main` function, if the session is
    started inside one (each point of a sweep its own); None elsewhere."""
    import sys

    if "hydra" not in sys.modules:  # no Hydra app imported it: do not import it here
        return None
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    from omegaconf.errors import MissingMandatoryValue

    if not HydraConfig.initialized():
        return None
    try:
        hydra = HydraConfig.get()
        # A point of a sweep (-m): its folder is fixed for the sweep, and the points must
        # not share outputs/session. A single run keeps outputs/session: its own output
        # folder is dated anew at every command, so running it again would not resume.
        if hydra.mode != RunMode.MULTIRUN:
            return None
        return str(hydra.runtime.output_dir)
    except MissingMandatoryValue:  # Hydra's compose API: a config composed, no job run
        return None
