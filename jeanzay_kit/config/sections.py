"""The frozen sections of a JobSpec: each one the checked values of one part of the config.

Pure values. The parallel layout is the section of `parallel` (distributed/layout.py, a
value object like torchtitan's ParallelDims); the cluster profile is config/clusters.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

from jeanzay_kit.config import schema
from jeanzay_kit.config.clusters import Partition
from jeanzay_kit.slurm_syntax.timefmt import format_time

# The schema's defaults (declared there once) for the fields below that have one: a
# settings object built by hand (tests, benchmarks) gets what the YAML would give.
_JOB, _TRAIN, _LOADER = schema.JobConfig(), schema.TrainConfig(), schema.LoaderConfig()
_CHECKPOINT, _ADAMW = schema.CheckpointConfig(), schema.AdamWConfig()
# Threads (so DCP shard files) a rank writes a checkpoint with, at most: fewer on a
# machine with fewer cores or with checkpoint.writer_threads (ckpt/checkpointer.py),
# counted by the storage forecast (launch/footprint.py).
WRITER_THREADS_MAX = 4


@dataclass(frozen=True)
class ContainerSettings:
    """job.container.*, checked (config/container_rules.py); rendered by slurm/container.py."""

    image: str  # a .sif path; $NAME expanded on the node
    runtime: str  # singularity | apptainer
    binds: tuple[str, ...] = ()  # added to the defaults
    options: tuple[str, ...] = ()  # more options of `<runtime> exec`


@dataclass(frozen=True)
class JobSettings:
    """job.*: how the job is named and started."""

    name: str
    log_dir: str
    python: str
    entry: str
    workdir: str | None  # #SBATCH --chdir; None: the directory the script is rendered in
    # Copy the project's code at submission and run that copy (None: on Slurm profiles).
    snapshot: bool | None = _JOB.snapshot
    # The files copied outside a git repository.
    snapshot_include: tuple[str, ...] = tuple(_JOB.snapshot_include)
    # Past either, a file is data, reached in place (project/places.py).
    snapshot_max_file_bytes: int = _JOB.snapshot_max_file_bytes
    snapshot_max_folder_files: int = _JOB.snapshot_max_folder_files
    args: tuple[str, ...] = ()  # your own command's arguments (job.entry a script)
    entry_kind: str = _JOB.entry_kind  # auto | toolkit | script (distributed/script_env.py)
    resume_args: tuple[str, ...] = ()  # added when an attempt resumes (script/script_rules.py)
    args_may_change: tuple[str, ...] = ()  # options left out of the run's identity
    script_outputs: tuple[str, ...] = tuple(_JOB.script_outputs)  # node/script_cwd_rules.py
    dependency: str | None = _JOB.dependency  # sbatch --dependency (slurm/flags.py)
    sbatch_args: tuple[str, ...] = ()  # more #SBATCH options, "--name=value"
    srun_args: tuple[str, ...] = ()  # more options of the training step's srun
    container: ContainerSettings | None = None  # every task runs in it (job.container)

    @property
    def runs_script(self) -> bool:
        """job.entry is the user's own command, not the toolkit's loop."""
        from jeanzay_kit.config.entry import runs_script

        return runs_script(self.entry, self.entry_kind)

    def snapshot_for(self, is_slurm: bool) -> bool:
        """job.snapshot, with null meaning: on Slurm profiles, not for cluster=local."""
        return is_slurm if self.snapshot is None else self.snapshot


@dataclass(frozen=True)
class Resources:
    """resources.* (and cluster.account), resolved: exactly what sbatch is asked for."""

    account: str | None
    partition: Partition
    constraint: str | None
    qos: str | None  # None: no --qos line (the site's default applies)
    nodes: int
    gpus_per_node: int
    ntasks_per_node: int
    cpus_per_task: int
    time_minutes: int
    mem: str | None
    time_min_minutes: int | None = None  # --time-min: None, none asked

    @property
    def time(self) -> str:
        return format_time(self.time_minutes)

    @property
    def time_min(self) -> str | None:
        return None if self.time_min_minutes is None else format_time(self.time_min_minutes)

    @property
    def total_gpus(self) -> int:
        return 0 if self.partition.cpu_only else self.nodes * self.gpus_per_node


@dataclass(frozen=True)
class Communication:
    """parallel.* beyond the layout: how the process group talks."""

    backend: str  # auto | nccl | gloo
    timeout_minutes: float
    bucket_cap_mb: float  # DDP gradient bucket


class TrainLoop(TypedDict):
    """train.* checked on its own (config/run_rules.check_train_loop): TrainSettings less
    the batch arithmetic and the precision, which need the layout."""

    steps: int
    seed: int
    log_every: int
    eval_every: int
    eval_batches: int | None
    eval_fraction: float
    activation_checkpointing: bool
    compile: bool | None
    tf32: bool
    nonfinite: str


@dataclass(frozen=True)
class TrainSettings:
    """train.*: the loop, with the batch arithmetic and the precision resolved."""

    steps: int
    seed: int
    global_batch_size: int
    micro_batch_size: int  # with micro_batch_auto: the largest allowed, until the run measures
    grad_accum_steps: int
    precision: str  # bf16 | fp16 | fp32, or "auto" on cluster=local (decided at run time)
    log_every: int
    eval_every: int  # 0: never
    eval_batches: int | None  # older spelling of eval.max_batches
    eval_fraction: float
    activation_checkpointing: bool
    compile: bool | None  # None: auto (on CUDA with ddp or fsdp, off on the CPU)
    nonfinite: str = _TRAIN.nonfinite  # stop | skip: a NaN/inf loss
    tf32: bool = _TRAIN.tf32  # TF32 matmuls and convolutions on CUDA
    # train.micro_batch_size=auto: the run finds the largest that fits (train/micro_batch.py)
    micro_batch_auto: bool = False
    global_batch_auto: bool = False  # train.global_batch_size=auto, resolved above


@dataclass(frozen=True)
class EvalSettings:
    """eval.*, with the older train.eval_* spellings folded in."""

    data: Mapping[str, object] | None  # the validation set's node; None: the held-out tail
    every_steps: int  # 0: never
    max_batches: int | None  # global batches per evaluation; None: the whole set
    micro_batch_size: int
    metrics: Mapping[str, Mapping[str, object]]  # name -> node with a _target_


@dataclass(frozen=True)
class LoaderSettings:
    """loader.*: torch's DataLoader. num_workers is resolved (auto: the CPUs of one
    training process minus one) where the CPUs are known: on Slurm profiles at validation,
    on cluster=local by the worker (`workers_for`)."""

    num_workers: int | None  # None: auto, decided by the worker from its CPUs
    pin_memory: bool | None  # None: auto (on CUDA)
    persistent_workers: bool
    prefetch_factor: int | None
    collate_fn: Mapping[str, object] | None
    cpus_per_process: int | None = None  # what auto was resolved from, for display
    # A stream (IterableDataset) resumed: exact (its saved state, or refuse), replay
    # (re-read what was taken), restart (from its beginning). train/stream.py.
    stream_resume: str = _LOADER.stream_resume

    def workers_for(self, cpus: int) -> int:
        """auto: one CPU for the training loop, the others load data."""
        return self.num_workers if self.num_workers is not None else max(0, cpus - 1)

    def pin_for(self, device_type: str) -> bool:
        return self.pin_memory if self.pin_memory is not None else device_type == "cuda"


@dataclass(frozen=True)
class LossSettings:
    """loss.*: criterion(output, target), the model's own output, or model.loss()."""

    form: str  # criterion | output | model
    criterion: Mapping[str, object] | None  # the node to instantiate (form=criterion)
    target_key: str | None  # dict batches with a criterion: the target's key


@dataclass(frozen=True)
class OptimSettings:
    """optim.*: the optimizer and its warmup + cosine schedule."""

    name: str  # adamw | sgd
    lr: float
    weight_decay: float
    warmup_steps: int
    min_lr_ratio: float
    grad_clip: float  # 0: no clipping
    betas: tuple[float, float] = (_ADAMW.betas[0], _ADAMW.betas[1])  # adamw
    momentum: float = 0.0  # sgd's (optim.momentum); 0.0 here: AdamW has none
    fused: bool | None = None  # None: auto (torch's fused kernels on CUDA)


@dataclass(frozen=True)
class CheckpointSettings:
    """checkpoint.* with the run directory and where to resume from."""

    run_dir: str  # job.run_dir: metrics.jsonl, checkpoints/, model_final.pt
    resume: str  # auto | never | the path of a step-N folder
    every_steps: int  # 0: only by time and at the end
    every_minutes: float | None
    keep_last: int
    use_async: bool  # checkpoint.async
    allow_config_change: bool
    on_write_error: str = _CHECKPOINT.on_write_error  # stop | continue
    # The metrics.jsonl key whose best checkpoint retention keeps (eval_loss, eval_<name>),
    # and "min" or "max"; None: none.
    keep_best: str | None = _CHECKPOINT.keep_best
    # auto | min | max (train/components.py best_direction)
    keep_best_mode: str = _CHECKPOINT.keep_best_mode
    # checkpoint.dir: the folder on a fast tier the checkpoints go to (None: run_dir)
    dir: str | None = _CHECKPOINT.dir
    # checkpoint.writer_threads: DCP writer threads per rank (None: one per core, up to
    # WRITER_THREADS_MAX)
    writer_threads: int | None = _CHECKPOINT.writer_threads


@dataclass(frozen=True)
class PreemptionSettings:
    """preemption.*: the time-limit warning, requeue, and the wait after SIGTERM."""

    signal: str  # USR1 | USR2 | TERM
    lead_seconds: int
    # After saving on SIGTERM in a Slurm job: how long to wait for Slurm to end the job
    # (a preempted job is requeued by Slurm only if it has not ended by itself).
    term_wait_seconds: int
    requeue: bool
    max_restarts: int  # after a hang or a crash


@dataclass(frozen=True)
class MetricsSettings:
    """metrics.*: what rank 0 records besides metrics.jsonl."""

    tensorboard: bool  # also <run_dir>/tensorboard event files
    wandb: bool  # also a W&B run, one per run directory (runtime/trackers.py)
    wandb_project: str | None  # None: job.name
    wandb_entity: str | None  # None: W&B's default entity
    wandb_mode: str  # offline | online
    mlflow: bool  # also an MLflow run, one per run directory
    mlflow_uri: str | None  # None: a file store in <run_dir>/mlruns
    mlflow_experiment: str | None  # None: job.name


@dataclass(frozen=True)
class TuneSettings:
    """tune.*: what a search optimizes (runtime/run_result.py)."""

    objective: str  # train_loss | eval_loss | eval_<metric>; a script's own name
    direction: str  # minimize | maximize | auto (resolved where the metric is known)
    # jzk tune (jeanzay_kit/tune/): the search space as (key, Hydra sweep syntax) pairs.
    params: tuple[tuple[str, str], ...] = ()
    n_trials: int = 20
    tasks: int = 1
    study_name: str = "jzk"
    dir: str = "tune/jzk"
    storage: str | None = None  # None: <dir>/study.journal
    sampler: str = "tpe"
    sampler_options: tuple[tuple[str, Any], ...] = ()  # keyword arguments of the sampler
    pruner: str = "median"
    prune_after_trials: int = 5
    prune_warmup_steps: int = 0
    seed: int | None = None
    # Every objective of a study of several (tune.objective as a list), the first being
    # `objective`, and their directions; left empty: (objective,), (direction,).
    objectives: tuple[str, ...] = ()
    directions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # One place fills them, so every reader takes `objectives` as it is.
        if not self.objectives:
            object.__setattr__(self, "objectives", (self.objective,))
        if not self.directions:
            object.__setattr__(self, "directions", (self.direction,))

    @property
    def several(self) -> bool:
        return len(self.objectives) > 1


@dataclass(frozen=True)
class WatchdogSettings:
    """watchdog.*: heartbeats and hang detection."""

    stall_seconds: float  # 0: no watchdog
    heartbeat_seconds: float
    health_gate: bool = True  # a Slurm job checks every node before step 0
