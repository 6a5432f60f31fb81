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
(runtime/metrics.py), and the same end after a signal (runtime/requeue.py after_stop).
docs/your-own-loop.md walks a plain script through it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal, cast

import torch
import torch.distributed as dist
from torch import nn

from jeanzay_kit import report
from jeanzay_kit import run_layout as layout
from jeanzay_kit.ckpt.checkpointer import Checkpointer
from jeanzay_kit.ckpt.digest import state_digest
from jeanzay_kit.ckpt.trainer_state import TrainerState
from jeanzay_kit.config.runtime_settings import RuntimeSettings, changed, resolve
from jeanzay_kit.config.runtime_settings import check as check_settings
from jeanzay_kit.config.runtime_settings import from_env as settings_from_env
from jeanzay_kit.config.runtime_settings import from_spec as runtime_settings
from jeanzay_kit.config.spec import JobSpec
from jeanzay_kit.contracts import MapDataset
from jeanzay_kit.distributed.layout import ParallelLayout
from jeanzay_kit.distributed.process_group import (
    DistContext,
    init_distributed,
    join_group,
    pick_device,
    resolve_backend,
)
from jeanzay_kit.distributed.ranks import RankInfo, rank_info_from_env
from jeanzay_kit.errors import JzkError, NonFiniteLoss
from jeanzay_kit.runtime import session_rules as rules
from jeanzay_kit.runtime.batch_sampler import PlanBatchSampler
from jeanzay_kit.runtime.heartbeat import start_watch
from jeanzay_kit.runtime.preemption import Agreement, StopRequest, signal_name, start_agreement
from jeanzay_kit.runtime.sampler import GlobalBatchPlan
from jeanzay_kit.runtime.seeded_samples import SeededSamples
from jeanzay_kit.runtime.trackers import flat_params, options_from_spec

# Session's keyword arguments that are runtime settings (config/runtime_settings.py).
_SETTING_NAMES = frozenset(f.name for f in fields(RuntimeSettings))


@dataclass(frozen=True)
class StepVerdict:
    """What every rank agreed before an update (Session.agree_before_update)."""

    stop: bool  # some rank received a stop signal: save at this step's end and stop
    save_due: bool  # a save asked for by any rank (the toolkit's loop: rank 0's clock)
    nonfinite: bool  # some rank's loss is NaN or infinite


class Session:
    """The runtime of a loop you wrote. Use it as a context manager (`with session() as
    s:`); every rank runs the same calls in the same order (several are collectives).

    steps: how many steps the run makes (progress lines and ETA; None: unknown).
    run_dir: where checkpoints, metrics.jsonl and heartbeats go (default: JZK_RUN_DIR
    under `jzk train`/`jzk submit`, else outputs/session).

    The other settings default to the job's config under `jzk train|submit
    job.entry=your_script.py` (the key in brackets), else to that key's shipped default
    (config/runtime_settings.py); a value given here wins over both.
    device: auto | cpu | cuda [cluster.device]. backend: auto (NCCL on GPUs, gloo on the
    CPU) | nccl | gloo [parallel.backend]. timeout_minutes: a collective waiting this
    long fails the run [parallel.timeout_minutes]. keep_last: complete checkpoints kept
    [checkpoint.keep_last]. stall_seconds: a rank without progress this long is named by
    the watchdog and the run stops, 0: off [watchdog.stall_seconds]. heartbeat_seconds
    [watchdog.heartbeat_seconds]. requeue: after a stop by the time-limit signal, requeue
    the job under plain srun; a script task of the toolkit is requeued by its wrapper
    [preemption.requeue]. requeue_signal: which signal is the time-limit warning
    [preemption.signal]. term_wait_seconds: after a SIGTERM save, how long to wait for
    Slurm to end the job [preemption.term_wait_seconds]. objective: the name of the
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
        stall_seconds: float | None = None,
        heartbeat_seconds: float | None = None,
        requeue: bool | None = None,
        requeue_signal: str | None = None,
        term_wait_seconds: float | None = None,
        objective: str | None = None,
        direction: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        # Signals are noted from the very start, never fatal (runtime/preemption.py).
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
        self._setup(
            steps,
            Path(rules.run_dir_for(os.fspath(run_dir) if run_dir else None, env)),
            settings,
            rank_info_from_env(env),
            stop=stop,
            env=env,
        )
        # A loop run on its own (not a job.entry script, whose wrapper holds it; not
        # the toolkit's loop, whose entry point does) holds its run directory itself.
        self._holds_lease = self.is_main and not rules.under_script_task(env)

    @classmethod
    def from_spec(
        cls,
        spec: JobSpec,
        info: RankInfo,
        run_dir: Path,
        *,
        stop: StopRequest,
        visible_devices: str | None,
        env: Mapping[str, str],
    ) -> Session:
        """The runtime of the toolkit's own loop (node/worker.py): the settings of a
        validated job, the rank its entry point read, the stop request it made first
        thing, and the job's parallel layout (the group gets its device mesh, `s.ctx`)."""
        session = cls.__new__(cls)
        env = dict(env)  # what the worker was given, not this process's variables
        if visible_devices is not None:
            env["CUDA_VISIBLE_DEVICES"] = visible_devices
        else:
            env.pop("CUDA_VISIBLE_DEVICES", None)
        session._setup(spec.train.steps, run_dir, runtime_settings(spec), info, stop=stop, env=env)
        session._layout = spec.layout
        session._metrics_options = {
            "allocation_s": spec.resources.time_minutes * 60 if spec.cluster.is_slurm else None,
            "lead_s": spec.preemption.lead_seconds,
            "tensorboard": spec.metrics.tensorboard,
            "trackers": options_from_spec(spec),
            "tracker_params": {
                **flat_params(spec.config),
                "jzk.run_dir": str(run_dir),
                "jzk.job_id": env.get("SLURM_JOB_ID", ""),
            },
        }
        return session

    def _setup(
        self,
        steps: int | None,
        run_dir: Path,
        settings: RuntimeSettings,
        info: RankInfo,
        *,
        stop: StopRequest,
        env: dict[str, str],
    ) -> None:
        self._stop, self._env = stop, env
        self.settings = settings
        self.steps = steps
        self.info = info
        self.run_dir = run_dir
        self._layout: ParallelLayout | None = None  # the toolkit's loop: its device mesh
        self.ctx: DistContext | None = None  # the group and its mesh (from_spec)
        self.device = torch.device("cpu")
        self.mode = "ddp"  # what s.wrap did: a checkpoint records it
        self.stopped_by = ""
        self.start_step = 0  # where ckpt.resume() put the run (the sampler starts there)
        self.start_position = 0
        self.last_loss: float | None = None
        self._data: dict[str, Any] = {}  # the data order, for the resume check
        self._checkpointers: list[SessionCheckpointer] = []
        self._own_group = False
        self._heartbeat: Any = None
        self._watchdog: Any = None
        self._metrics: Any = None
        self._metrics_options: dict[str, Any] = {}  # the job's metrics.* (from_spec)
        self._pending: tuple[Agreement, int] | None = None  # should_stop's, and its step
        self._holds_lease = False  # set by __init__ for a loop run on its own
        self._lease: Any = None
        self._reported: tuple[float, int] | None = None  # s.report's (value, step)
        self._window = (time.perf_counter(), 0)  # (start, first step) of the logged window

    @property
    def keep_last(self) -> int:
        return self.settings.keep_last

    # ---- where this process sits ---------------------------------------------------------

    @property
    def rank(self) -> int:
        return self.info.rank

    @property
    def local_rank(self) -> int:
        return self.info.local_rank

    @property
    def world_size(self) -> int:
        return self.info.world_size

    @property
    def is_main(self) -> bool:
        return self.info.rank == 0

    # ---- start and end -------------------------------------------------------------------

    def start(self, before_join: Callable[[torch.device], None] | None = None) -> None:
        """The device, the process group, heartbeats and the watchdog (`with session()`
        does it). before_join(device): what must come first (the toolkit's loop checks the
        user's contracts on rank 0 before any collective)."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if self._holds_lease and self._lease is None:
            from jeanzay_kit.runtime.lease import acquire_for

            # One writer per run directory (runtime/lease.py), before anything is written.
            self._lease = acquire_for(self.run_dir, self._env, "a session loop")
        if self.is_main:
            from jeanzay_kit.runtime.run_result import clear_result

            clear_result(self.run_dir)  # an earlier end's result no longer holds
        self.device = pick_device(
            self.info, self.settings.device, self._env.get("CUDA_VISIBLE_DEVICES")
        )
        if before_join is not None:
            before_join(self.device)
        self._join()
        self._heartbeat, self._watchdog = start_watch(
            self.run_dir,
            self.rank,
            self.steps or 0,
            self.info.job_id,
            self.settings.heartbeat_seconds,
            self.settings.stall_seconds,
        )

    @property
    def heartbeat(self) -> Any:
        """This rank's heartbeat writer (runtime/heartbeat.py): beat(step, phase)."""
        return self._heartbeat

    def close(self, failed: bool = False) -> None:
        """Stop the watchdog and the heartbeats and leave the group (together, after a
        success; at once after a failure). `with session()` does it."""
        self._close(failed)

    def __enter__(self) -> Session:
        try:
            self.start()
        except JzkError as err:  # no GPU where device=cuda asks for one, ...: one line
            report.error("session", f"rank {self.rank}: {err}")
            raise SystemExit(err.exit_code) from None
        if self.is_main:
            different = changed(self.settings)
            print(
                f"jzk session: {self.world_size} rank(s) ({self.info.launcher}), device "
                f"{self.device}, backend {dist.get_backend()}, run dir {self.run_dir}"
                + (f", settings {different}" if different else ""),
                flush=True,
            )
        return self

    def _join(self) -> None:
        """The process group, unless the script made one already; with the job's device
        mesh for the toolkit's loop."""
        if self._layout is not None:
            self.ctx = init_distributed(
                self.info,
                self._layout,
                self.device,
                backend=self.settings.backend,
                timeout_minutes=self.settings.timeout_minutes,
            )
            self._own_group = True
            return
        backend = resolve_backend(self.settings.backend, self.device, "session(backend)")
        self._own_group = join_group(self.info, self.device, backend, self.settings.timeout_minutes)

    def __exit__(self, kind: type | None, err: BaseException | None, _tb: object) -> Literal[False]:
        if err is None:
            try:
                self._settle()  # the last step's agreement: a NaN there is said too
            except JzkError as caught:
                err = caught
        failed = err is not None and not isinstance(err, SystemExit)
        self._close(failed)
        if err is None and not self.stopped_by and self.is_main:
            self._write_result()
        self._stop.ignore_from_now()  # a late signal has nothing left to stop
        if isinstance(err, JzkError):
            # A refusal every rank meets alike (a changed config, a NaN): said once.
            if self.is_main or err.rank_local:
                report.error("session", err)
            raise SystemExit(err.exit_code) from None
        return False

    def _close(self, failed: bool) -> None:
        if self._pending is not None and not failed:
            self._pending[0].result()  # no collective left in flight when the group goes
        self._pending = None
        try:
            for ckpt in self._checkpointers:
                if not failed:
                    ckpt.close()
        finally:
            if self._watchdog is not None:
                self._watchdog.stop()
            if self._heartbeat is not None:
                self._heartbeat.stop(failed=failed)
            if self._metrics is not None:
                self._metrics.close()
            if self._own_group and dist.is_initialized():
                if not failed:
                    dist.barrier()  # leave together (a peer may still talk to us)
                dist.destroy_process_group()
            self._own_group = False
            if self._lease is not None:
                self._lease.release()
                self._lease = None

    # ---- the model -----------------------------------------------------------------------

    def wrap(self, model: nn.Module, fsdp: bool = False, **ddp_options: Any) -> nn.Module:
        """The model on this rank's device, wrapped for data parallelism: DDP (its options,
        e.g. find_unused_parameters=True, pass through), or FSDP2 (`fully_shard` on each
        child that holds parameters, then the root) with fsdp=True. Build the optimizer
        after wrapping: FSDP2 replaces the parameters. One process: the model as is."""
        model = model.to(self.device)
        if fsdp:
            from torch.distributed.fsdp import fully_shard

            self.mode = "fsdp"
            for child in model.children():
                if any(p.requires_grad for p in child.parameters()):
                    fully_shard(child)
            fully_shard(model)
            # The parameters' all-gather starts here: a rank that got this far waits for
            # its peers (runtime/stall.py WAITING_PHASES).
            model.register_forward_pre_hook(lambda *_: self._beat_phase("forward"))
            return model
        self.mode = "ddp"
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
        return ddp

    def _beat_phase(self, phase: str) -> None:
        self._heartbeat.beat(self._heartbeat.step, phase)

    def save_model(self, model: nn.Module, name: str = layout.MODEL_FINAL) -> str:
        """Collective: the whole model's weights (gathered from FSDP shards, without DDP's
        `module.`) written by rank 0 to <run_dir>/<name>, with their sha256 digest next to
        it (<name without .pt>.sha256). Returns the digest (on every rank)."""
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
        )

        state = get_model_state_dict(
            model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
        )
        digest = [state_digest(cast(dict[str, torch.Tensor], state)) if self.is_main else None]
        if self.is_main:
            torch.save(state, self.run_dir / name)
            (self.run_dir / f"{Path(name).stem}.sha256").write_text(f"{digest[0]}\n")
        dist.broadcast_object_list(digest, src=0)
        return str(digest[0])

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
        if any(ckpt.resumed for ckpt in self._checkpointers):
            raise JzkError(
                "s.sampler(...) was called after ckpt.resume(): the resume could not check "
                "the data order, nor start the sampler at the checkpoint's step. HINT: "
                "create the sampler before ckpt.resume()"
            )
        size = len(dataset)
        accumulation = rules.split_global_batch(batch_size, global_batch_size, self.world_size)
        global_batch = batch_size * self.world_size * accumulation
        self._data = {"dataset_size": size, "global_batch_size": global_batch, "seed": seed}
        return PlanSampler(
            self,
            dataset,
            global_batch,
            batch_size,
            seed=seed,
            accumulation=accumulation,
            seed_per_sample=seed_per_sample,
        )

    def sample_position(self, step: int) -> int:
        """The global sample index where `step` starts (what a checkpoint records)."""
        return self.start_position + (step - self.start_step) * self._data.get(
            "global_batch_size", 0
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
        A per-step collective that every rank waits for cost 6 % of a 42 ms step on 2
        CPU workers (bench/bench_session.py); this one costs nothing measurable."""
        self._heartbeat.beat(step + 1, "step_boundary")
        bad = torch.zeros(1, dtype=torch.int64, device=self.device)
        if loss is not None:
            bad = (~torch.isfinite(loss.detach())).any().reshape(1).to(torch.int64)
        stop = self._settle()  # the previous step's agreement
        self._pending = (start_agreement([self._stop.signum], self.device, extra=bad), step + 1)
        # Back in the user's code: a rank stuck there names its step and this phase.
        self._heartbeat.beat(step + 1, "own_step")
        return stop

    def _settle(self) -> bool:
        """Read the agreement in flight: raise NonFiniteLoss when any rank's loss was not
        finite, note a signal. True: stop (now, or already decided)."""
        if self._pending is None:
            return bool(self.stopped_by)
        agreement, at = self._pending
        self._pending = None
        signum, bad = agreement.result()
        if bad:
            raise NonFiniteLoss(
                f"the loss is NaN or infinite at step {at} on some rank; nothing was saved "
                "after it. HINT: lower the learning rate or clip gradients, look at the data "
                "of this step; the run resumes from its newest checkpoint in "
                f"{self.run_dir / layout.CHECKPOINTS}"
            )
        if signum and not self.stopped_by:
            self.stopped_by = signal_name(signum)
            if self.is_main:
                print(f"{self.stopped_by} received: stopping after step {at + 1}", flush=True)
        return bool(self.stopped_by)

    def agree_before_update(
        self, step: int, loss: torch.Tensor | None = None, *, save_due: bool = False
    ) -> StepVerdict:
        """Collective, after the backward pass of step `step` and before the optimizer
        applies it: every rank learns, now, whether a stop signal arrived, whether any rank
        wants a save, and whether any loss is NaN or infinite, so a loop can drop that
        update (the toolkit's loop: train.nonfinite=skip) or stop before it. The same
        all-reduce as should_stop, waited for at once: it costs a per-step wait that
        should_stop hides, for an answer before the update."""
        self._settle()  # nothing of should_stop's left in flight
        bad = torch.zeros(1, dtype=torch.int64, device=self.device)
        if loss is not None:
            bad = (~torch.isfinite(loss.detach())).any().reshape(1).to(torch.int64)
        signum, due, nonfinite = start_agreement(
            [self._stop.signum, int(save_due)], self.device, extra=bad
        ).result()
        if signum and not self.stopped_by:
            self.stopped_by = signal_name(signum)
        return StepVerdict(stop=bool(signum), save_due=bool(due), nonfinite=bool(nonfinite))

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
        self._reported = (number, int(step))

    def _write_result(self) -> None:
        """result.json as every loop writes it (runtime/run_result.py), with s.report's
        value over the logged one."""
        from jeanzay_kit.runtime.run_result import direction_of, write_end_result

        objective = self.settings.objective
        reported = None
        if self._reported is not None:
            reported = {objective: self._reported[0], "objective_step": self._reported[1]}
        direction = direction_of(objective, self.settings.direction)
        write_end_result(self.run_dir, (objective,), (direction,), reported)

    def requeue_and_exit(self) -> None:
        """After ckpt.save(...) of a stopped run: end this process with exit code 3 ("run me
        again"). Under plain srun rank 0 first requeues the job when Slurm's time-limit
        signal stopped it, and after a SIGTERM (a preemption) every rank waits for Slurm
        to end the job; a script task of the toolkit is requeued by its wrapper."""
        from jeanzay_kit.runtime.requeue import after_stop

        saved = max((c.saved_step for c in self._checkpointers), default=0)
        self._close(failed=False)
        self._stop.ignore_from_now()
        requeue = self.settings.requeue and not rules.under_script_task(self._env)
        after_stop(
            self.info,
            self.stopped_by or "a request",
            saved,
            requeue_signal=self.settings.requeue_signal,
            requeue=requeue,
            term_wait_seconds=self.settings.term_wait_seconds,
        )

    def log(self, step: int, **values: float | torch.Tensor) -> None:
        """Collective (call it on every rank at the same steps): one line of metrics.jsonl
        and a progress line (rank 0) for `step` (the number of steps done). Tensors are
        averaged over the ranks in one all-reduce; numbers are rank 0's. The step time
        is measured since the previous call."""
        tensors = {k: v for k, v in values.items() if isinstance(v, torch.Tensor)}
        names = list(tensors)
        record: dict[str, Any] = {"step": step}
        if names:
            stacked = torch.stack([tensors[k].detach().float().reshape(()) for k in names])
            stacked = stacked.to(self.device)
            dist.all_reduce(stacked, op=dist.ReduceOp.SUM)
            means = (stacked / self.world_size).tolist()
            record.update(zip(names, means, strict=True))
        record.update({k: float(v) for k, v in values.items() if k not in names})
        if "loss" in record:
            self.last_loss = record["loss"]
        started, first = self._window
        done = max(1, step - first)
        record["step_time_s"] = (time.perf_counter() - started) / done
        if self._data:
            record["samples_per_s"] = self._data["global_batch_size"] / record["step_time_s"]
        self._writer().log(record, judge_input=False)
        self._window = (time.perf_counter(), step)
        self._heartbeat.beat(step, "step_boundary")

    def _writer(self) -> Any:
        return self.metrics_writer()

    def close_metrics(self) -> None:
        """Close the metrics writer now (the session does at its end); the next
        metrics_writer() call opens a new one, from the step note_resumed gave."""
        if self._metrics is not None:
            self._metrics.close()
            self._metrics = None

    def metrics_writer(self, *, end_time: float | None = None, loader: str = "") -> Any:
        """The run's metrics.jsonl and progress lines (runtime/metrics.py MetricsWriter),
        opened at the first call from the resumed step on and closed with the session:
        s.log writes through it, the toolkit's loop writes its richer records through it.
        end_time: when the allocation ends (default: SLURM_JOB_END_TIME); loader: what
        the data is loaded with, for the input-bound note."""
        if self._metrics is None:
            from jeanzay_kit.runtime.metrics import MetricsWriter

            if end_time is None:
                end = self._env.get("SLURM_JOB_END_TIME")
                end_time = float(end) if end and end.isdigit() else None
            self._metrics = MetricsWriter(
                self.run_dir,
                self.is_main,
                self.steps or 0,
                resume_step=self.start_step,
                end_time=end_time,
                loader=loader,
                **self._metrics_options,
            )
        return self._metrics

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
        ckpt = SessionCheckpointer(self, model, optimizer, extra, config, allow_config_change)
        self._checkpointers.append(ckpt)
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
        return Checkpointer(
            self.run_dir,
            module,
            optimizer,
            rank=self.rank,
            world=world,
            config=config,
            device=self.device,
            keep_last=self.keep_last,
            use_async=use_async,
            keep_best=keep_best,
        )

    def note_resumed(self, step: int, position: int, loss: float | None) -> None:
        """Where the run stands after a resume (ckpt.resume() says it; the toolkit's loop,
        which loads its own checkpoint, too): the step, the global sample index and the
        last loss, so that the sampler, sample_position and the metrics go on from there."""
        self.start_step, self.start_position, self.last_loss = step, position, loss
        self._window = (time.perf_counter(), step)


class PlanSampler(PlanBatchSampler):
    """s.sampler(...): the toolkit's batch sampler (runtime/batch_sampler.py) over the
    steps from where the run resumed on, to session(steps=...) or without end. The start
    is read when the DataLoader starts iterating: iterate after ckpt.resume().

    `dataset` is what the DataLoader reads: the dataset itself, or with
    seed_per_sample=True the dataset read by (index, position) keys, each sample's random
    numbers seeded from its global position (runtime/seeded_samples.py)."""

    def __init__(
        self,
        session: Session,
        dataset: MapDataset,
        global_batch: int,
        micro_batch: int,
        *,
        seed: int,
        accumulation: int,
        seed_per_sample: bool,
    ) -> None:
        self.session = session
        self.dataset_size, self.global_batch, self.micro_batch = (
            len(dataset),
            global_batch,
            micro_batch,
        )
        self.seed, self.accumulation_steps = seed, accumulation
        self.dataset: Any = SeededSamples(dataset, seed) if seed_per_sample else dataset
        super().__init__(self.plan(), 0, None, positions=seed_per_sample)

    def plan(self) -> GlobalBatchPlan:
        s = self.session
        return GlobalBatchPlan(
            dataset_size=self.dataset_size,
            global_batch=self.global_batch,
            micro_batch=self.micro_batch,
            dp_size=s.world_size,
            dp_rank=s.rank,
            seed=self.seed,
            start_step=s.start_step,
            start_position=s.start_position,
        )

    def first_step(self) -> int:
        return self.session.start_step

    def last_step(self) -> int | None:
        return self.session.steps

    def __iter__(self) -> Iterator[list[Any]]:
        for ckpt in self.session._checkpointers:
            if not ckpt.resumed:
                raise JzkError(
                    "the DataLoader over s.sampler(...) started before ckpt.resume(): it "
                    "would read from step 0 whatever the checkpoint. HINT: call "
                    "ckpt.resume() first, then iterate the loader"
                )
        # A generator: the check runs at the first batch, where the start is read.
        yield from super().__iter__()

    def __len__(self) -> int:
        if self.session.steps is None:
            raise TypeError("s.sampler(...) has no length without session(steps=...)")
        return super().__len__()


class SessionCheckpointer:
    """s.checkpointer(...): resume() once before the loop, save(step) at the steps you
    choose (every rank, same step). Saved with the toolkit's Checkpointer: written aside,
    checksummed, renamed, manifest last; the newest complete one is resumed."""

    def __init__(
        self,
        session: Session,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        extra: dict[str, Any] | None,
        config: Mapping[str, Any] | None,
        allow_config_change: bool,
    ) -> None:
        self.session, self.extra = session, extra if extra is not None else {}
        self.user_config, self.allow_config_change = config, allow_config_change
        self.inner = session.open_checkpointer(
            model,
            optimizer,
            world=rules.checkpoint_world(session.mode, session.world_size),
            config={},
        )
        self.resumed = False
        self.saved_step = 0

    def _refresh(self) -> None:
        """The layout and config as they are now (s.wrap and s.sampler may come later)."""
        s = self.session
        self.inner.world = rules.checkpoint_world(s.mode, s.world_size)
        self.inner.config = rules.resume_config(s._data, self.user_config)

    def resume(self) -> int:
        """Collective: load the newest complete checkpoint of the run directory, if any,
        and return its step (0 on a fresh start). The model, optimizer, every rank's
        random generators and `extra` are restored; s.sampler continues from there."""
        self._refresh()
        folder = self.inner.find("auto")
        self.resumed = True
        if folder is None:
            self.session.note_resumed(0, 0, None)
            return 0
        self.inner.check_compatible(folder, self.allow_config_change)
        state = self.inner.load(folder)
        self._restore_extra(state.extra or {})
        self.session.note_resumed(state.step, state.sample_position, state.last_loss)
        self.saved_step = state.step
        if self.session.is_main:
            print(f"resumed from {folder} (step {state.step})", flush=True)
        return state.step

    def save(self, step: int) -> None:
        """Collective: checkpoint step-`step` (the number of steps done)."""
        self._refresh()
        s = self.session
        s._settle()  # a NaN of the last step is caught before its weights are saved
        s._heartbeat.beat(step, "checkpoint")
        extra = {
            k: v.state_dict() if hasattr(v, "state_dict") else v for k, v in self.extra.items()
        }
        problems = rules.extra_problems(extra, "extra", torch.is_tensor)
        if problems:
            raise JzkError(rules.extra_message(problems))
        trainer = TrainerState(step, s.sample_position(step), {}, None, s.last_loss, extra)
        self.inner.save(step, trainer, force_sync=True)
        self.saved_step = step

    def _restore_extra(self, saved: dict[str, Any]) -> None:
        for key, value in saved.items():
            target = self.extra.get(key)
            if target is not None and hasattr(target, "load_state_dict"):
                target.load_state_dict(value)
            else:
                self.extra[key] = value

    def close(self) -> None:
        self.inner.close()


# `with session(steps=...) as s:`: the documented spelling, the same class.
session = Session
