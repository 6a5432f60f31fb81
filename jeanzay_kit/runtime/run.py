"""One process of a run, from start to end: the lifecycle every loop goes through.

A `Run` owns what happens around a loop's steps: the device, the process group (with the
job's device mesh for the toolkit's loop), heartbeats and the hang watchdog, the
agreement on stopping at a step boundary (one all-reduce), metrics.jsonl, the
checkpointers, where a resume put the run, and its end: result.json after a completed
run, requeue-or-exit after a stop, leaving the group, and the error said once after a
failure. The toolkit's loop (train/loop.py, started by node/worker.py with
`Run.from_spec`) drives it directly, as Accelerate's internals use its state object; the
documented `Session` (runtime/session.py) is its face for your loop.
"""

from __future__ import annotations

import errno
import os
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, cast

import torch
import torch.distributed as dist

from jeanzay_kit import report
from jeanzay_kit.ckpt.checkpointer import Checkpointer
from jeanzay_kit.ckpt.trainer_state import TrainerState
from jeanzay_kit.config.runtime_settings import RuntimeSettings
from jeanzay_kit.config.runtime_settings import from_spec as runtime_settings
from jeanzay_kit.config.spec import JobSpec
from jeanzay_kit.distributed.layout import ParallelLayout
from jeanzay_kit.distributed.process_group import (
    DistContext,
    init_distributed,
    join_group,
    pick_device,
    resolve_backend,
)
from jeanzay_kit.distributed.ranks import RankInfo
from jeanzay_kit.distributed.script_env import REHEARSAL_ENV
from jeanzay_kit.ending.preemption import Agreement, StopRequest, signal_name, start_agreement
from jeanzay_kit.errors import JzkError, NonFiniteLoss, PeerFailed, is_peer_failure
from jeanzay_kit.rundir.rank_lines import STOPPING
from jeanzay_kit.rundir.run_directory import RunDir
from jeanzay_kit.runtime.heartbeat import start_watch
from jeanzay_kit.runtime.run_result import direction_of
from jeanzay_kit.runtime.session_rules import whole_step
from jeanzay_kit.runtime.trackers import flat_params, options_from_spec


@dataclass(frozen=True)
class StepVerdict:
    """What every rank agreed before an update (Session.agree_before_update)."""

    stop: bool  # some rank received a stop signal: save at this step's end and stop
    save_due: bool  # a save asked for by any rank (the toolkit's loop: rank 0's clock)
    nonfinite: bool  # some rank's loss is NaN or infinite


def _say(line: str) -> None:
    print(f"jzk: {line}", flush=True)


def _as_is(err: BaseException) -> BaseException:
    return err


@dataclass(frozen=True)
class Ending:
    """How a run ends: the objectives of its result and their directions (auto already
    resolved, runtime/run_result.py direction_of), the prefix its errors are said with,
    and how a failure is explained (the toolkit's loop names a dead loader worker)."""

    objectives: Sequence[str]
    directions: Sequence[str]
    said_as: str = "session"
    explain: Callable[[BaseException], BaseException] = _as_is


@dataclass
class Run:
    """The state and lifecycle of one process of a run (see the module docstring)."""

    settings: RuntimeSettings
    info: RankInfo
    run_dir: RunDir
    steps: int | None
    stop: StopRequest
    env: dict[str, str]
    ending: Ending
    layout: ParallelLayout | None = None  # the toolkit's loop: its device mesh
    metrics_options: dict[str, Any] = field(default_factory=dict)  # the job's metrics.*
    holds_lease: bool = False  # a loop run on its own holds its run directory itself
    ctx: DistContext | None = None  # the group and its mesh (layout given)
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    mode: str = "ddp"  # what s.wrap did: a checkpoint records it
    stopped_by: str = ""
    start_step: int = 0  # where the resume put the run (the sampler starts there)
    start_position: int = 0
    last_loss: float | None = None
    data: dict[str, Any] = field(default_factory=dict)  # the data order, for the resume check
    checkpointers: list[Any] = field(default_factory=list)  # SessionCheckpointer
    opened: list[Checkpointer] = field(default_factory=list)  # every loop's, for kept/
    saved_step: int = 0  # the newest step a checkpointer of this run saved
    stop_step: int = 0  # the step a stop signal ended the loop after (settle), 0: none
    heartbeat: Any = None
    reported: tuple[float, int] | None = None  # s.report's (value, step)
    _watchdog: Any = None
    # What the watchdog ends a hung rank with (Exit.HUNG, its stacks dumped): os._exit,
    # or a sweep's task that first requeues its point (node/entry.py).
    on_hang: Callable[[int], None] = os._exit
    _metrics: Any = None
    _own_group: bool = False
    _lease: Any = None
    _pending: tuple[Agreement, int] | None = None  # should_stop's agreement, its step
    _window: tuple[float, int] = field(default_factory=lambda: (time.perf_counter(), 0))

    @classmethod
    def from_spec(
        cls,
        spec: JobSpec,
        info: RankInfo,
        run_dir: RunDir,
        *,
        stop: StopRequest,
        visible_devices: str | None,
        env: Mapping[str, str],
        ending: Ending | None = None,
    ) -> Run:
        """The run of the toolkit's own loop (node/worker.py): the settings of a
        validated job, the rank its entry point read, the stop request it made first
        thing, and the job's parallel layout (the group gets its device mesh, `run.ctx`).
        ending: the objectives and directions of its result, how its failures are named
        and said (node/worker_start.py ending_of; default: the job's objectives, their
        directions by the one rule without a metric's word)."""
        if ending is None:
            pairs = zip(spec.tune.objectives, spec.tune.directions, strict=True)
            directions = tuple(direction_of(o, d) for o, d in pairs)
            ending = Ending(spec.tune.objectives, directions, said_as=report.TRAIN)
        env = dict(env)  # what the worker was given, not this process's variables
        if visible_devices is not None:
            env["CUDA_VISIBLE_DEVICES"] = visible_devices
        else:
            env.pop("CUDA_VISIBLE_DEVICES", None)
        run = cls(runtime_settings(spec), info, run_dir, spec.train.steps, stop, env, ending)
        run.layout = spec.layout
        run.metrics_options = {
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
        return run

    @property
    def is_main(self) -> bool:
        return self.info.rank == 0

    # ---- start and end -------------------------------------------------------------------

    def start(self, before_join: Callable[[torch.device], None] | None = None) -> None:
        self.run_dir.root.mkdir(parents=True, exist_ok=True)
        if self.holds_lease and self._lease is None:
            from jeanzay_kit.rundir.lease import acquire_for

            # One writer per run directory (lease.py), before anything is written.
            self._lease = acquire_for(self.run_dir, self.env, "a session loop")
        if self.is_main:
            from jeanzay_kit.runtime.run_result import clear_result

            clear_result(self.run_dir)  # an earlier end's result no longer holds
        self.device = pick_device(
            self.info, self.settings.device, self.env.get("CUDA_VISIBLE_DEVICES")
        )
        if before_join is not None:
            before_join(self.device)
        self._join()
        self.heartbeat, self._watchdog = start_watch(
            self.run_dir,
            self.info.rank,
            self.steps or 0,
            self.info.job_id,
            self.settings.heartbeat_seconds,
            self.settings.stall_seconds,
            exit_process=self.on_hang,
        )

    def _join(self) -> None:
        """The process group, unless the script made one already; with the job's device
        mesh for the toolkit's loop."""
        if self.layout is not None:
            self.ctx = init_distributed(
                self.info,
                self.layout,
                self.device,
                backend=self.settings.backend,
                timeout_minutes=self.settings.timeout_minutes,
            )
            self._own_group = True
            return
        backend = resolve_backend(self.settings.backend, self.device, "session(backend)")
        self._own_group = join_group(self.info, self.device, backend, self.settings.timeout_minutes)

    def close(self, failed: bool) -> None:
        """Checkpointers, watchdog, heartbeats, metrics, the group (together after a
        success, at once after a failure), the run directory's lease."""
        if self._pending is not None and not failed:
            self._pending[0].result()  # no collective left in flight when the group goes
        self._pending = None
        try:
            for ckpt in self.checkpointers:
                if not failed:
                    ckpt.close()
            if not failed:
                self._keep_checkpoints()
        finally:
            if self._watchdog is not None:
                self._watchdog.stop()
            if self.heartbeat is not None:
                self.heartbeat.stop(failed=failed)
            self.close_metrics()
            if self._own_group and dist.is_initialized():
                if not failed:
                    dist.barrier()  # leave together (a peer may still talk to us)
                dist.destroy_process_group()
            self._own_group = False
            if self._lease is not None:
                self._lease.release()
                self._lease = None

    def _keep_checkpoints(self) -> None:
        """checkpoint.dir: rank 0 copies the newest and best checkpoints from the fast
        tier to <run_dir>/kept (ckpt/kept.py) at the end of the job's work; the others
        wait for it in close's barrier."""
        if not (self.settings.checkpoint_dir and self.is_main and self.opened):
            return
        from jeanzay_kit.ckpt.kept import keep

        try:
            keep(self.run_dir, self.opened[0].keep_best, _say)
        except OSError as err:  # the run trained: it ends as it did, the loss said once
            full = err.errno in (errno.ENOSPC, errno.EDQUOT)
            first = (
                "free room there (`df -i`, `df -h`; files count as much as bytes), then "
                if full
                else ""
            )
            _say(
                f"WARNING: the newest checkpoints were not all kept in {self.run_dir.kept} "
                f"({err.strerror or err}): what is missing there is only in checkpoint.dir, "
                f"which a purge empties. HINT: {first}`jzk ckpt archive {self.run_dir.root} "
                "--to $STORE` (docs/storage.md)"
            )

    def _place_checkpoints(self) -> None:
        """checkpoint.dir: <run_dir>/checkpoints links to the run's folder on the fast
        tier, given back the newest kept checkpoint after a purge (rank 0); collective."""
        if not self.settings.checkpoint_dir:
            return
        if self.is_main:
            from jeanzay_kit.ckpt.kept import fast_root, place

            place(
                self.run_dir, fast_root(self.settings.checkpoint_dir, self.run_dir, self.env), _say
            )
        if dist.is_initialized():
            dist.barrier()

    def end(self, err: BaseException | None) -> None:
        """The end of a `with` block: the last agreement, close, the result of a completed
        run (rank 0), and a refusal every rank meets alike said once (SystemExit)."""
        if err is None:
            try:
                self.settle()  # the last step's agreement: a NaN there is said too
            except JzkError as caught:
                err = caught
        failed = err is not None and not isinstance(err, SystemExit)
        self.close(failed)
        if err is None and not self.stopped_by and self.is_main:
            self.write_result()
        self.stop.ignore_from_now()  # a late signal has nothing left to stop
        if isinstance(err, JzkError):
            self._say_once(err)

    def _say_once(self, err: JzkError) -> NoReturn:
        """A refusal every rank meets alike (a changed config, a NaN): rank 0 says it
        once; a failure of one rank's own (rank_local) is said by that rank. Exits with
        its code."""
        if self.is_main or err.rank_local:
            prefix = f"rank {self.info.rank}: " if err.rank_local else ""
            report.error(self.ending.said_as, f"{prefix}{err}")
        raise SystemExit(err.exit_code) from None

    def fail(self, caught: BaseException) -> NoReturn:
        """The failure path of a loop that does not end in a `with` block (the toolkit's):
        say once why this rank stops, before the launcher tears the others down, then
        leave the group at once, without waiting for peers that may be stuck in a
        collective. A refusal exits with its code; anything else is raised again."""
        try:
            if isinstance(caught, (SystemExit, KeyboardInterrupt)):
                raise caught  # already said (a refused check exits 2), or the user's ^C
            err = self.ending.explain(caught)
            if isinstance(err, JzkError) and not isinstance(err, PeerFailed):
                self._say_once(err)
            if is_peer_failure(err):  # the launcher names the rank that died
                first = str(err).strip().splitlines()[0][:300] if str(err).strip() else ""
                print(
                    f"rank {self.info.rank} stopped: a peer left the job ({first})", file=sys.stderr
                )
            else:
                print(
                    f"rank {self.info.rank} failed:\n{traceback.format_exc()}",
                    file=sys.stderr,
                    flush=True,
                )
            raise caught
        finally:
            self.stop.ignore_from_now()
            self.close(failed=True)

    def write_result(self) -> None:
        """Rank 0: result.json as every loop writes it (runtime/run_result.py), with
        s.report's value over the logged one."""
        from jeanzay_kit.runtime.run_result import write_end_result

        reported = None
        if self.reported is not None:
            value, step = self.reported
            reported = {self.ending.objectives[0]: value, "objective_step": step}
        write_end_result(self.run_dir, self.ending.objectives, self.ending.directions, reported)

    def requeue_and_exit(self, step: int | None = None) -> None:
        """After the save of a stopped run: close, then rank 0 requeues the job when the
        time-limit signal stopped it (ending/requeue.py), every rank exits 3."""
        from jeanzay_kit.ending.requeue import after_stop_as_set

        saved = self.saved_step if step is None else step
        if self.is_main and step is None and self.stop_step > saved:
            self._say_unsaved_stop(saved)
        self.close(failed=False)
        self.stop.ignore_from_now()
        after_stop_as_set(self.settings, self.info, self.env, self.stopped_by or "a request", saved)

    def _say_unsaved_stop(self, saved: int) -> None:
        """A loop of the user's that stops on the signal without saving where it stopped:
        said where it happens (`jzk rehearse` tells it too, from the steps lost)."""
        newest = f"its newest checkpoint is step-{saved}" if saved else "it has no checkpoint"
        print(
            f"{self.ending.said_as}: warning: stopped after step {self.stop_step} without saving "
            f"it: {newest}, and the steps since are trained again. HINT: save where it "
            "stops (ckpt.save(step + 1)) before s.requeue_and_exit() (docs/your-own-loop.md, "
            "part b)",
            file=sys.stderr,
            flush=True,
        )

    # ---- every step ----------------------------------------------------------------------

    def should_stop(self, step: int, loss: torch.Tensor | None) -> bool:
        self.heartbeat.beat(step + 1, "step_boundary")
        stop = self.settle()  # the previous step's agreement
        self._pending = (
            start_agreement([self.stop.signum], self.device, extra=self._nonfinite(loss)),
            step + 1,
        )
        # Back in the user's code: a rank stuck there names its step and this phase.
        self.heartbeat.beat(step + 1, "own_step")
        return stop

    def _nonfinite(self, loss: torch.Tensor | None) -> torch.Tensor:
        if self._rehearsed_nan():
            return torch.ones(1, dtype=torch.int64, device=self.device)
        if loss is None:
            return torch.zeros(1, dtype=torch.int64, device=self.device)
        return (~torch.isfinite(loss.detach())).any().reshape(1).to(torch.int64)

    def _rehearsed_nan(self) -> bool:
        """`jzk rehearse`'s NaN: rank 0 takes the fault file and says the loss is not
        finite; the agreement tells every rank (rehearse/runner.py). Outside a
        rehearsal nothing is looked for."""
        if not (self.is_main and self.env.get(REHEARSAL_ENV)):
            return False
        try:
            self.run_dir.fault_nan.unlink()
        except FileNotFoundError:
            return False
        return True

    def settle(self) -> bool:
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
                f"{self.run_dir.checkpoints}"
            )
        if signum and not self.stopped_by:
            self.stopped_by, self.stop_step = signal_name(signum), at + 1
            if self.is_main:
                print(f"{self.stopped_by} {STOPPING} {at + 1}", flush=True)
        return bool(self.stopped_by)

    def agree_before_update(self, loss: torch.Tensor | None, save_due: bool) -> StepVerdict:
        self.settle()  # nothing of should_stop's left in flight
        signum, due, nonfinite = start_agreement(
            [self.stop.signum, int(save_due)], self.device, extra=self._nonfinite(loss)
        ).result()
        if signum and not self.stopped_by:
            self.stopped_by = signal_name(signum)
        return StepVerdict(stop=bool(signum), save_due=bool(due), nonfinite=bool(nonfinite))

    def log(self, step: int, values: Mapping[str, float | torch.Tensor]) -> None:
        step = whole_step(step)
        tensors = {k: v for k, v in values.items() if isinstance(v, torch.Tensor)}
        names = list(tensors)
        record: dict[str, Any] = {"step": step}
        if names:
            stacked = torch.stack([tensors[k].detach().float().reshape(()) for k in names])
            stacked = stacked.to(self.device)
            dist.all_reduce(stacked, op=dist.ReduceOp.SUM)
            means = (stacked / self.info.world_size).tolist()
            record.update(zip(names, means, strict=True))
        record.update({k: float(v) for k, v in values.items() if k not in names})
        if "loss" in record:
            self.last_loss = record["loss"]
        started, first = self._window
        done = max(1, step - first)
        record["step_time_s"] = (time.perf_counter() - started) / done
        if self.data:
            record["samples_per_s"] = self.data["global_batch_size"] / record["step_time_s"]
        self.metrics_writer().log(record, judge_input=False)
        self._window = (time.perf_counter(), step)
        self.heartbeat.beat(step, "step_boundary")

    # ---- what the run writes -------------------------------------------------------------

    def metrics_writer(self, end_time: float | None = None, loader: str = "") -> Any:
        if self._metrics is None:
            from jeanzay_kit.runtime.metrics import MetricsWriter

            if end_time is None:
                end = self.env.get("SLURM_JOB_END_TIME")
                end_time = float(end) if end and end.isdigit() else None
            self._metrics = MetricsWriter(
                self.run_dir,
                self.is_main,
                self.steps or 0,
                resume_step=self.start_step,
                end_time=end_time,
                loader=loader,
                **self.metrics_options,
            )
        return self._metrics

    def close_metrics(self) -> None:
        if self._metrics is not None:
            self._metrics.close()
            self._metrics = None

    def open_checkpointer(
        self,
        module: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        world: Mapping[str, Any],
        config: Mapping[str, Any],
        options: Mapping[str, Any],
    ) -> Checkpointer:
        ckpt = Checkpointer(
            self.run_dir,
            module,
            optimizer,
            rank=self.info.rank,
            world=world,
            config=config,
            device=self.device,
            keep_last=self.settings.keep_last,
            **options,
        )
        self.opened.append(ckpt)
        return ckpt

    def save_model(
        self, model: torch.nn.Module | Mapping[str, torch.Tensor] | None, name: str | None = None
    ) -> str:
        """Collective (Session.save_model): the whole model's weights, gathered from FSDP
        shards when given a module, written by rank 0 with their digest; the digest on
        every rank."""
        state: Any = model
        if isinstance(model, torch.nn.Module):
            from torch.distributed.checkpoint.state_dict import (
                StateDictOptions,
                get_model_state_dict,
            )

            state = get_model_state_dict(
                model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
            )
        where = name if name is not None else self.run_dir.model_final.name
        digest = [self.write_model(state, where) if self.is_main else None]
        if dist.is_initialized():
            dist.broadcast_object_list(digest, src=0)
        return str(digest[0])

    def write_model(self, state: Mapping[str, torch.Tensor], name: str) -> str:
        """Rank 0: a model's full state dict in <run_dir>/<name>, its sha256 digest beside
        it (<name without .pt>.sha256); the digest."""
        from jeanzay_kit.ckpt.digest import state_digest

        digest = state_digest(cast(dict[str, torch.Tensor], state))
        path, digest_path = self.run_dir.saved_model(name)
        torch.save(state, path)
        digest_path.write_text(f"{digest}\n")
        return digest

    def resume_from(
        self, ckpt: Checkpointer, which: str, allow_config_change: bool
    ) -> tuple[TrainerState, Path | None]:
        """Collective: the one resume of every loop. Load the checkpoint `which` names
        (checkpoint.resume: auto | never | a step folder) into ckpt's module and optimizer,
        after refusing a changed config or layout, say so on rank 0, and note where the run
        stands. The trainer state (step 0 and nothing else for a fresh start) and its
        folder; the caller restores what only it holds (a scheduler, `extra`)."""
        self._place_checkpoints()
        folder = ckpt.find(which)
        state = TrainerState(0, 0, {}, None, None)
        if folder is not None:
            ckpt.check_compatible(folder, allow_config_change)
            state = ckpt.load(folder)
            if self.is_main:
                print(f"resumed from {folder} (step {state.step})", flush=True)
        self.note_resumed(state.step, state.sample_position, state.last_loss)
        return state, folder

    def note_resumed(self, step: int, position: int, loss: float | None) -> None:
        self.start_step, self.start_position, self.last_loss = step, position, loss
        self.saved_step = step
        self._window = (time.perf_counter(), step)

    def sample_position(self, step: int) -> int:
        return self.start_position + (step - self.start_step) * self.data.get(
            "global_batch_size", 0
        )
