"""The config schema: one typed dataclass per config group, each field documented here.

Registered in Hydra's ConfigStore (config/compose.py: `register_schemas`) as
`<group>/base_<name>`; every YAML file in conf/ starts with `defaults: [base_<name>,
_self_]`, so the YAML only chooses values, and Hydra refuses while composing, before
anything runs, a key the schema does not have (`train.stpes=10`) or a value of the wrong
type (`train.steps=ten`); config/compose.py turns the refusal into our `key=value reason.
HINT: fix`. A key added with `+key=value` bypasses the schema: `unknown_keys` below
catches those for config/spec.py.

What a type cannot say (a partition that exists, a QoS whose time limit fits, a batch size
that divides) is checked by config/spec.py, which turns the composed config into the frozen
JobSpec. Model and data schemas describe the examples shipped in conf/; a user's own model
YAML may leave the schema out (its `_target_` keys then reach the class unchecked).

A field typed `Any` is one OmegaConf must not check: a union of types (OmegaConf 2.3
structured configs have none: `num_workers` is a number or "auto"), a node a user fills
(`data`, `criterion`, metrics), or a mapping whose keys vary per site (partitions, QoS),
which config/clusters.py and the rules of config/spec.py check key by key instead.

Pure data: imports neither torch nor Hydra. Field order follows the YAML files, so the
composed config lists keys in the same order as before the schema existed.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any, Optional, Union

# OmegaConf reads the annotations at run time: they must stay evaluable (Optional/Union
# rather than `X | None` strings OmegaConf 2.3 cannot parse in every form).
# ruff: noqa: UP007, UP045


# Slurm's default MaxArraySize (slurm.conf(5)): the one place the default is written.
MAX_ARRAY_SIZE = 1001


@dataclass
class RemoteConfig:
    """Laptop mode (docs/remote.md): where the toolkit lives on the cluster's login node."""

    # The toolkit's folder there (its venv, the projects' code, their runs); $VARS and ~
    # expand on the login node. null: ~/jzk (Jean Zay's profiles: $WORK/jzk).
    workdir: Optional[str] = None
    python: str = "python3"  # the interpreter its venv is made from, after the module lines
    setup: list[str] = field(default_factory=list)  # shell lines before every remote command


@dataclass
class AllocationConfig:
    """The account's hours on this cluster's pool (docs/queue.md); hours null: none
    declared, nothing checked."""

    hours: Optional[float] = None  # GPU hours granted to cluster.account on this pool
    since: Optional[str] = None  # the day the allocation began (YYYY-MM-DD); null: 1 year ago
    blocked_at: float = 1.0  # the site stops the account's jobs past hours x this
    go_over: bool = False  # true: submit a request even past what is left


@dataclass
class ClusterConfig:
    """A site: how jobs are submitted there and the limits sbatch would enforce (docs/sites.md)."""

    name: str = "?"  # the profile's name, as in cluster=<name>
    description: str = ""  # one line for `jzk clusters`
    scheduler: str = "slurm"  # slurm | local (worker processes on this machine)
    device: str = "cuda"  # cuda | cpu | auto (decided on the machine at run time)
    account: Optional[str] = None  # --account; Jean Zay: <project>@<arch>
    account_required: bool = False  # the site refuses jobs without --account
    account_suffix: Optional[str] = None  # e.g. "@h100": accounts must end with it
    bf16: bool = True  # the GPUs have bfloat16 (false before Ampere: V100, T4)
    hint: Optional[str] = None  # --hint, e.g. nomultithread
    gpu_request: str = "gres"  # gres -> --gres=gpu:N ; gpus -> --gpus-per-node=N
    modules: list[str] = field(default_factory=list)  # `module load`, in this order
    module_purge: bool = False  # `module purge` before loading
    pytorch_module: Optional[str] = None  # the site's torch, loaded after `modules`
    env: dict[str, str] = field(default_factory=dict)  # exported in the job script
    # Containers (job.container): the runtime, the module that brings it, the folders
    # every container sees (Jean Zay: $WORK, $SCRATCH, $DSDIR) and where images must be.
    container_runtime: str = "apptainer"  # singularity | apptainer
    container_module: Optional[str] = None  # e.g. singularity (Jean Zay)
    container_binds: list[str] = field(default_factory=list)  # e.g. [$WORK, $SCRATCH]
    container_allowed_dir: Optional[str] = None  # Jean Zay: $SINGULARITY_ALLOWED_DIR
    max_array_size: int = MAX_ARRAY_SIZE  # a sweep is split into arrays this size
    default_partition: str = "?"  # used when resources.partition is null
    # name -> {gpus_per_node, cpus_per_node, max_time, select, constraints,
    # default_constraint, preemptible, mem_per_node}; optional keys vary per site, so
    # config/clusters.py checks each partition (names, types, unknown keys).
    partitions: dict[str, Any] = field(default_factory=dict)
    # name -> {max_time, max_gpus_per_job}; empty: QoS names are passed through unchecked.
    qos: dict[str, Any] = field(default_factory=dict)
    default_qos: Optional[str] = None  # what Slurm applies without --qos
    remote: RemoteConfig = field(default_factory=RemoteConfig)  # from a laptop over ssh
    allocation: AllocationConfig = field(default_factory=AllocationConfig)  # the hours granted
    # Compute nodes without internet (docs/offline.md).
    compute_internet: bool = True  # false: network accesses found before the queue
    prefetch_partition: Optional[str] = None  # where `jzk prefetch` runs (null: here)
    cache_dir: Optional[str] = None  # HF_HOME, TORCH_HOME... below it (null: ~/.cache)
    # The places to write (docs/storage.md): name -> {path, files, bytes, purge_days, quota};
    # Jean Zay: scratch, work, store, jobscratch. Empty: not declared.
    storage: dict[str, Any] = field(default_factory=dict)


@dataclass
class ResourcesConfig:
    """What the job asks Slurm for (docs/configuration.md)."""

    nodes: int = 1  # --nodes
    # auto: 1 on a cluster; on cluster=local one worker per visible GPU, or 2 CPU workers.
    gpus_per_node: Union[int, str] = "auto"
    cpus_per_task: Union[int, str] = "auto"  # auto: the node's CPU share of the task's GPUs
    time: str = "01:00:00"  # HH:MM:SS, D-HH:MM:SS or minutes
    # --time-min: backfill may start the job sooner with a limit down to this (the run
    # saves at its limit and resumes: docs/queue.md); null: the job gets resources.time.
    time_min: Optional[str] = None
    qos: Optional[str] = "auto"  # auto: the shortest QoS whose limits fit; null: none
    partition: Optional[str] = None  # null: the profile's default partition
    constraint: Optional[str] = None  # -C; null: the partition's default
    mem: Optional[str] = None  # --mem, e.g. 64G; null: the site's default


@dataclass
class ParallelConfig:
    """How the model is spread over the GPUs (docs/parallelism.md)."""

    mode: str = "ddp"  # ddp | fsdp | pipeline | pipeline_ddp | dataparallel
    pipeline_stages: int = 1  # ranks per pipeline (pipeline, pipeline_ddp)
    microbatches: int = 1  # pipeline micro-batches per micro batch
    schedule: str = "1f1b"  # gpipe | 1f1b | interleaved_1f1b
    stages_per_rank: int = 2  # model chunks per rank, interleaved_1f1b only
    launcher: str = "srun"  # srun: one task per GPU | torchrun: one task per node
    backend: str = "auto"  # auto | nccl | gloo (auto: nccl on GPU, gloo on CPU)
    # Collective timeout: a stuck rank fails the job instead of hanging it.
    timeout_minutes: Union[int, float] = 10
    bucket_cap_mb: Union[int, float] = 25  # DDP gradient bucket size


@dataclass
class TrainConfig:
    """The optimisation loop. global_batch_size does not depend on the number of GPUs:
    gradient accumulation = global_batch_size / (data-parallel size x micro_batch_size)."""

    # Samples per optimizer step, over all replicas; auto: micro-batch x data-parallel
    # size, rounded up to at least 32 (config/layout_rules.py auto_global_batch).
    global_batch_size: Union[int, str] = "auto"
    # Samples per forward/backward on one replica; auto: the largest that fits the GPU
    # (measured at start, recorded in the run; ddp and dataparallel), 8 on the CPU.
    micro_batch_size: Union[int, str] = 8
    precision: str = "auto"  # auto | bf16 | fp16 | fp32
    steps: int = 200  # optimizer steps
    seed: int = 0  # model init and data order; the same on every rank
    log_every: int = 10  # metrics (stdout, metrics.jsonl) every N steps
    # The older spelling of eval.every_steps and eval.max_batches (still read when the
    # new keys are null).
    eval_every: int = 50  # evaluate every N steps (0: never)
    eval_batches: Optional[int] = None  # at most N global batches per evaluation
    eval_fraction: float = 0.05  # the end of the dataset held out for evaluation
    activation_checkpointing: bool = False  # recompute block activations in backward
    # torch.compile the model (ddp, fsdp); auto: on CUDA, off on the CPU.
    compile: Union[bool, str] = "auto"
    tf32: bool = True  # TF32 tensor-core matmuls and convolutions for fp32 math on CUDA
    # A NaN or infinite loss on any rank: `stop` ends the run before the optimizer applies
    # it (exit 2; the newest complete checkpoint is kept), `skip` drops that step's update.
    nonfinite: str = "stop"


@dataclass
class EvalConfig:
    """Evaluation: a validation set, how often, how much, and metrics beyond the loss
    (docs/your-model-and-data.md). None of it changes what is trained."""

    # A dataset node with a _target_ (your validation set); null: the held-out end of the
    # training dataset (train.eval_fraction).
    data: Any = None
    every_steps: Optional[int] = None  # evaluate every N steps (0: never); null: train.eval_every
    # At most N global batches (train.global_batch_size samples each) per evaluation; null:
    # train.eval_batches if set, else the whole set.
    max_batches: Optional[int] = None
    micro_batch_size: Optional[int] = None  # samples per forward; null: train.micro_batch_size
    # name -> a node with a _target_ with torchmetrics' interface (update(output, target),
    # compute(), reset()), e.g. accuracy: {_target_: torchmetrics.classification.
    # MulticlassAccuracy, num_classes: 10}; logged as eval_<name>.
    metrics: Any = field(default_factory=dict)


@dataclass
class LoaderConfig:
    """torch's DataLoader over the toolkit's global-batch plan (docs/your-model-and-data.md).

    The batch order comes from the plan, never from the loader, so none of these keys
    changes what is trained: they may change between a checkpoint and its resume."""

    # Worker processes per training process. auto: the process's CPUs (as Slurm gives
    # them: cpus-per-task / processes per task) minus one for the training loop; 0: load
    # in the training process.
    num_workers: Any = "auto"
    pin_memory: Any = "auto"  # auto: on CUDA devices (page-locked host batches copy async)
    persistent_workers: bool = False  # keep workers between iterations (eval re-reads)
    # Batches each worker loads ahead; null: enough for one optimizer step (at least 2).
    prefetch_factor: Optional[int] = None
    # A batch from a list of samples: null (torch's default_collate), or a node with a
    # _target_ (a class is built with the node's other keys, a function used as it is).
    collate_fn: Any = None
    # A streaming dataset (IterableDataset) resumed from a checkpoint: exact (from the
    # state its state_dict() saved; refused without it or on another number of ranks),
    # replay (re-read and drop what each rank trained on), restart (from its beginning).
    stream_resume: str = "exact"


@dataclass
class LossConfig:
    """How a micro-batch's loss is computed (docs/your-model-and-data.md).

    loss=criterion calls criterion(output, target), built from `criterion._target_`;
    loss=output takes the loss the model returns (a scalar tensor, `.loss`, or a
    mapping's "loss"); loss=model calls model.loss(output, target) (the shipped examples)."""

    form: str = "model"  # criterion | output | model
    criterion: Any = None  # loss=criterion: a node with a _target_ (torch.nn.CrossEntropyLoss)
    # Dict batches with a criterion: the key holding the target (left out of model(**batch)).
    target_key: Optional[str] = None


@dataclass
class AdamWConfig:
    """AdamW with linear warmup, then cosine decay to min_lr_ratio x lr."""

    name: str = "adamw"  # which optimizer: adamw
    lr: float = 0.003  # peak learning rate, reached after warmup_steps
    # Adam's moving-average coefficients of the gradient and of its square.
    betas: list[float] = field(default_factory=lambda: [0.9, 0.95])
    weight_decay: float = 0.01  # decoupled weight decay
    warmup_steps: int = 10  # linear warmup from 0 to lr
    min_lr_ratio: float = 0.1  # the cosine ends at min_lr_ratio x lr
    grad_clip: float = 1.0  # max global gradient norm; 0 disables clipping
    fused: Union[bool, str] = "auto"  # torch's fused optimizer kernels; auto: on CUDA


@dataclass
class SGDConfig:
    """SGD with momentum and the same warmup + cosine schedule."""

    name: str = "sgd"  # which optimizer: sgd
    lr: float = 0.05  # peak learning rate, reached after warmup_steps
    momentum: float = 0.9  # heavy-ball momentum, in [0, 1)
    weight_decay: float = 0.0  # L2 penalty added to the gradient
    warmup_steps: int = 10  # linear warmup from 0 to lr
    min_lr_ratio: float = 0.1  # the cosine ends at min_lr_ratio x lr
    grad_clip: float = 1.0  # max global gradient norm; 0 disables clipping
    fused: Union[bool, str] = "auto"  # torch's fused optimizer kernels; auto: on CUDA


class CheckpointConfig:
    """When and how checkpoints are written under <run_dir>/checkpoints/step-N."""

    every_steps: int = 100  # save every N optimizer steps (0: only by time and at the end)
    every_minutes: Optional[float] = None  # and/or every T minutes of training
    keep_last: int = 3  # complete checkpoints kept; the newest complete one never goes
    # `async` (write in the background with DCP async_save) is added below: it is a Python
    # keyword, so it cannot be written as a class attribute.
    allow_config_change: bool = False  # resume even if the config changed
    # A save that cannot be written (full disk or quota, I/O error): `stop` ends the run
    # cleanly (exit 2, not requeued), `continue` warns and trains on, trying again at the
    # next save. Either way the partial folder is removed and the previous checkpoint kept.
    on_write_error: str = "stop"
    # Keep the checkpoint with the best evaluation out of retention: `loss` (eval_loss) or
    # the name of one of eval.metrics; null: none.
    keep_best: Optional[str] = None
    # auto | min | max: which value of keep_best is the best. auto: min for the loss, the
    # metric's own direction (torchmetrics' higher_is_better) for a metric.
    keep_best_mode: str = "auto"
    # Where the checkpoints are written (docs/storage.md): a folder on a fast tier, e.g.
    # $SCRATCH/jzk-checkpoints; <run_dir>/checkpoints then links to the run's folder there,
    # and the last and best checkpoints are copied to <run_dir>/kept at each job's end.
    # null: in the run directory.
    dir: Optional[str] = None
    # Threads each rank writes a checkpoint with, so DCP files per rank (+1 for its
    # rank-<r>.pt): fewer files on a filesystem that counts them ($WORK's inodes), slower
    # saves. null: one per core, up to sections.WRITER_THREADS_MAX.
    writer_threads: Optional[int] = None


# The key `checkpoint.async` is public. A dataclass field named `async` works as long as no
# generated method has to spell it: no __init__ argument, no repr, no comparison.
CheckpointConfig.__annotations__ = {
    "every_steps": int,
    "every_minutes": Optional[float],
    "keep_last": int,
    "async": bool,
    "allow_config_change": bool,
    "on_write_error": str,
    "keep_best": Optional[str],
    "keep_best_mode": str,
    "dir": Optional[str],
    "writer_threads": Optional[int],
}
setattr(CheckpointConfig, "async", field(default=False, init=False, repr=False, compare=False))
CheckpointConfig = dataclass(CheckpointConfig)  # type: ignore[misc]


@dataclass
class PreemptionConfig:
    """Time-limit warning and preemption (docs/preemption.md)."""

    signal: str = "USR1"  # USR1 | USR2 | TERM, sent lead_seconds before the time limit
    lead_seconds: int = 120  # enough for one step and one save
    requeue: bool = True  # --requeue, and `scontrol requeue` after the time-limit save
    # After a hang or a crash: how many times the run restarts from its newest complete
    # checkpoint (a Slurm job requeues itself; cluster=local restarts the workers).
    max_restarts: int = 3
    term_wait_seconds: int = 300  # after a SIGTERM save: wait this long for Slurm's kill


@dataclass
class WatchdogConfig:
    """Heartbeats and the hang watchdog (docs/stuck-jobs.md)."""

    # A rank whose heartbeat file is this old (frozen process) or that has not changed
    # step or phase for this long (stuck) stalls the run: stacks are dumped, the run
    # restarts. 0 turns the watchdog off (heartbeats are still written).
    stall_seconds: float = 300.0
    heartbeat_seconds: float = 2.0  # how often each rank writes its heartbeat file
    # A Slurm job's health gate, before step 0 of each start: on every node, the GPUs
    # Slurm gave are visible and run a kernel with their memory free, the run directory
    # and the scratch folders take writes; a node that fails is left out and the job
    # requeued before any training (docs/stuck-jobs.md). false: no gate.
    health_gate: bool = True


@dataclass
class MetricsConfig:
    """What rank 0 records besides metrics.jsonl (docs/stuck-jobs.md, `jzk report`)."""

    # Also write TensorBoard event files to <run_dir>/tensorboard (offline: nothing is sent
    # anywhere; `tensorboard --logdir <run_dir>` reads them on a login node or a laptop).
    tensorboard: bool = False
    # Also log the same records to a Weights & Biases run (the `trackers` extra: pip install
    # 'jeanzay_kit[trackers]'). One W&B run per run directory: its id is kept in
    # <run_dir>/trackers.json, so stops, requeues and resumes continue it, each step once.
    wandb: bool = False
    wandb_project: Optional[str] = None  # null: job.name
    wandb_entity: Optional[str] = None  # null: W&B's default entity
    # offline: files in <run_dir>/wandb, synced from a login node with the printed
    # `wandb sync` command (compute nodes have no internet); online: sent as it runs.
    wandb_mode: str = "offline"
    # Also log to an MLflow run, one per run directory (the same extra: mlflow-skinny).
    mlflow: bool = False
    # null: a file store in <run_dir>/mlruns; else any tracking URI (http://..., sqlite:///...).
    mlflow_uri: Optional[str] = None
    mlflow_experiment: Optional[str] = None  # null: job.name


@dataclass
class TuneConfig:
    """What a search optimizes (docs/tuning.md): the value a run returns to Hydra's sweeper
    and writes in <run_dir>/result.json."""

    # train_loss, eval_loss, or eval_<name> of a metric in eval.metrics (its last value);
    # a list of them is a study of several objectives (jzk tune: its Pareto front).
    # Any: a name or a list of names.
    objective: Any = "eval_loss"
    # minimize | maximize | auto (minimize a loss; a metric's own higher_is_better); with
    # several objectives, one for all or a list in their order.
    direction: Any = "auto"
    # `jzk tune`'s search space: {config key: Hydra's sweep syntax}, e.g.
    # optim.lr: tag(log, interval(1e-4, 1e-1)), model.n_layer: choice(2, 4).
    params: Any = None  # a mapping (Any: its keys have dots, which a typed dict refuses)
    n_trials: int = 20  # trials of the study in all; raise it and run again to extend it
    tasks: int = 1  # tasks that run trials at once, each asking for the next when done
    study_name: str = "${job.name}"  # the study's name in its storage
    # The study's folder: its journal (unless tune.storage) and one run dir per trial.
    dir: str = "tune/${tune.study_name}"
    # null: Optuna's JournalStorage in <tune.dir>/study.journal (a file on the shared
    # filesystem, no database server); or an RDB URL (sqlite:///..., postgresql://...).
    storage: Optional[str] = None
    # tpe | random | cmaes | qmc | gp | nsga2 (Optuna's TPESampler, RandomSampler,
    # CmaEsSampler, QMCSampler, GPSampler, NSGAIISampler; cmaes, qmc and gp need the tune
    # extra's cmaes and scipy).
    sampler: str = "tpe"
    # The sampler's own keyword arguments, e.g. {n_startup_trials: 5} for tpe or gp,
    # {restart_strategy: ipop} for cmaes, {qmc_type: halton} for qmc (Optuna's docs).
    sampler_options: Any = None
    # median | hyperband | none: stops a trial whose evaluations trail the others'
    # (Optuna's MedianPruner, HyperbandPruner); it saves and ends PRUNED.
    pruner: str = "median"
    prune_after_trials: int = 5  # no pruning until this many trials have finished
    # nor before this training step of a trial; null: a quarter of train.steps.
    prune_warmup_steps: Optional[int] = None
    seed: Optional[int] = None  # the sampler's seed; null: a different search each time


@dataclass
class ContainerConfig:
    """job.container: every task runs in a Singularity/Apptainer image (docs/containers.md)."""

    image: Optional[str] = None  # a .sif path, $VARS expanded on the node; null: no container
    runtime: Optional[str] = None  # singularity | apptainer; null: the profile's
    # Bind specs added to the defaults (the job's folders and the profile's), e.g. /data:/data.
    binds: list[str] = field(default_factory=list)
    options: list[str] = field(default_factory=list)  # more options of `<runtime> exec`


# Where training code conventionally saves: folders (a trailing "/") named out* (nanoGPT's
# out-shakespeare-char/, out/), checkpoint*/ckpt*/snapshot*, TensorBoard's runs/,
# Lightning's lightning_logs/, wandb/, mlruns/; and *.pt, *.pth, *.ckpt files at the root,
# as PyTorch's and IDRIS's examples write them; .hydra/, where a Hydra app records each
# start (script/hydra_app_rules.py). job.script_outputs' default.
SCRIPT_OUTPUTS = (
    "out*/",
    "checkpoint*/",
    "ckpt*/",
    "snapshot*/",
    "runs/",
    "lightning_logs/",
    "wandb/",
    "mlruns/",
    ".hydra/",
    "*.pt",
    "*.pth",
    "*.ckpt",
)


# A project file larger than this, or in a folder of more files than the other limit, is
# data, reached in place rather than frozen (project/places.py): a 12 KB script's
# snapshot stays kilobytes beside a data/ folder of token files and pretrained weights.
SNAPSHOT_MAX_FILE_BYTES = 256 * 1024
SNAPSHOT_MAX_FOLDER_FILES = 1000


@dataclass
class JobConfig:
    """The job itself: names, paths, interpreter (docs/configuration.md)."""

    name: str = "jzk"  # --job-name and the rendered script's name
    log_dir: str = "logs"  # Slurm's stdout/stderr and the frozen config
    workdir: Optional[str] = None  # --chdir, absolute; null: where you render/submit
    python: str = "auto"  # the interpreter the tasks run; auto: the one that ran jzk
    # What each task runs: the installed entry point of `jzk train`, or your own command
    # (a script path or `-m package.module`) run with job.args (distributed/script_env.py).
    entry: str = "-m jeanzay_kit.train_app"
    args: list[str] = field(default_factory=list)  # your command's arguments, exactly
    # Added after job.args on every attempt after one that left files of the script in
    # the run directory: its resume flag, e.g. [--init_from=resume].
    resume_args: list[str] = field(default_factory=list)
    # Options of job.args whose value may change without starting a new run (a log
    # level, an eval interval): left out of the run's identity, e.g. [--log_level].
    args_may_change: list[str] = field(default_factory=list)
    entry_kind: str = "auto"  # auto | toolkit | script
    # A script task's output places: project paths (globs from its root) where the script
    # writes, which start empty in its run instead of showing the project's copy (an
    # earlier run's checkpoint); every other project file is shown (docs/run-directories.md).
    script_outputs: list[str] = field(default_factory=lambda: list(SCRIPT_OUTPUTS))
    # metrics.jsonl, checkpoints/, model_final.pt: named from the job's identity so a
    # requeued or rerun job finds its checkpoints.
    run_dir: str = "outputs/${job.name}-${jzk.config_hash:}"
    # Copy the project's code at submission and run the copy (null: on Slurm profiles).
    snapshot: Optional[bool] = None
    # The files copied when the project is not a git repository (globs from its root).
    snapshot_include: list[str] = field(
        default_factory=lambda: ["**/*.py", "conf/**/*.yaml", "*.toml", "*.cfg", "*.txt"]
    )
    # Code is a source or configuration file no larger than this many bytes, outside any
    # folder holding more than snapshot_max_folder_files files; the rest (data, weights)
    # is reached where it lies, output places never frozen (docs/run-directories.md).
    snapshot_max_file_bytes: int = SNAPSHOT_MAX_FILE_BYTES
    snapshot_max_folder_files: int = SNAPSHOT_MAX_FOLDER_FILES
    # sbatch --dependency, e.g. afterany:1234 (start after job 1234 ends) or afterok:1:2.
    dependency: Optional[str] = None
    # More sbatch options, e.g. ["--mail-type=END", "--exclude=n1"] (not ones the config sets).
    sbatch_args: list[str] = field(default_factory=list)
    # More options of the training step's srun, e.g. ["--cpu-bind=cores"].
    srun_args: list[str] = field(default_factory=list)
    # A container every task runs in; the requeue runs outside it (docs/containers.md).
    container: ContainerConfig = field(default_factory=ContainerConfig)


@dataclass
class MLPConfig:
    """The residual-free MLP of the synthetic regression task (data=synthetic)."""

    _target_: str = "jeanzay_kit.examples.models.MLP"  # the class hydra.utils.instantiate builds
    in_dim: int = 32  # input features (${data.in_dim} in conf/)
    hidden: int = 128  # width of the hidden layers
    depth: int = 4  # hidden layers (pipeline stages split them)
    out_dim: int = 8  # outputs (${data.out_dim} in conf/)


@dataclass
class GPTConfig:
    """A small byte-level GPT; pair it with data=stdlib_text."""

    # The class hydra.utils.instantiate builds.
    _target_: str = "jeanzay_kit.examples.models.TinyGPT"
    vocab_size: int = 256  # bytes: 256
    block_size: int = 64  # context length (${data.block_size} in conf/)
    n_layer: int = 4  # transformer blocks (pipeline stages split them)
    n_embd: int = 128  # embedding width
    n_head: int = 4  # attention heads; must divide n_embd
    dropout: float = 0.0  # dropout probability (0: deterministic runs)


@dataclass
class SyntheticConfig:
    """y = tanh(x A) B + noise, generated from a seed."""

    # The class hydra.utils.instantiate builds.
    _target_: str = "jeanzay_kit.examples.datasets.SyntheticRegression"
    size: int = 8192  # samples (the end is held out: train.eval_fraction)
    in_dim: int = 32  # input features
    out_dim: int = 8  # targets per sample
    noise: float = 0.01  # standard deviation of the noise added to y
    seed: int = 1234  # the data's own seed: the same data whatever train.seed


@dataclass
class StdlibTextConfig:
    """Byte-level text: the Python standard library's own sources."""

    # The class hydra.utils.instantiate builds.
    _target_: str = "jeanzay_kit.examples.datasets.StdlibText"
    block_size: int = 64  # bytes per sample
    max_bytes: int = 2_000_000  # how much of the standard library to read


@dataclass
class TokenFileConfig:
    """A nanoGPT-format token file (uint16 ids), read through np.memmap: data=token_file."""

    # The class hydra.utils.instantiate builds.
    _target_: str = "jeanzay_kit.examples.tokens.TokenWindows"
    path: str = "???"  # the .bin file (python -m jeanzay_kit.examples.tokens OUT.bin FILES)
    block_size: int = 64  # tokens per sample (the model's context)
    random_windows: bool = True  # a random window per read (training); false: in order
    samples: Optional[int] = None  # samples per epoch; null: the file's tokens / block_size


@dataclass
class CausalLMConfig:
    """A Hugging Face-style causal LM in plain torch (output .loss and .logits)."""

    # The class hydra.utils.instantiate builds.
    _target_: str = "jeanzay_kit.examples.causal_lm.TinyCausalLM"
    vocab_size: int = 256  # bytes: 256
    block_size: int = 64  # context length (${data.block_size} in conf/)
    n_layer: int = 2  # transformer blocks
    n_embd: int = 64  # embedding width
    n_head: int = 4  # attention heads; must divide n_embd


@dataclass
class ImageFolderConfig:
    """A folder of image files, root/<class>/<image>, through torchvision's ImageFolder."""

    # The class hydra.utils.instantiate builds.
    _target_: str = "torchvision.datasets.ImageFolder"
    root: str = "???"  # the folder holding one sub-folder per class
    # Applied to each PIL image: a node with a _target_ (examples/images.py
    # image_transforms: random crop and flip for training, train=false for validation).
    transform: Any = None


@dataclass
class ImageCNNConfig:
    """A small convolutional image classifier (examples/images.py ImageCNN)."""

    # The class hydra.utils.instantiate builds.
    _target_: str = "jeanzay_kit.examples.images.ImageCNN"
    num_classes: int = 10  # the folder's classes
    width: int = 16  # channels of the first block (doubled by each of the next two)


@dataclass
class RootConfig:
    """The root: one node per group (each typed by its own schema), the job and resume."""

    cluster: Any = None  # ClusterConfig (cluster=<profile>)
    resources: Any = None  # ResourcesConfig
    parallel: Any = None  # ParallelConfig
    model: Any = None  # MLPConfig, GPTConfig, or a user's own node with a _target_
    data: Any = None  # SyntheticConfig, StdlibTextConfig, or a user's own node
    optim: Any = None  # AdamWConfig or SGDConfig
    loss: Any = None  # LossConfig (loss=criterion | output | model)
    loader: Any = None  # LoaderConfig
    eval: Any = None  # EvalConfig
    train: Any = None  # TrainConfig
    checkpoint: Any = None  # CheckpointConfig
    preemption: Any = None  # PreemptionConfig
    watchdog: Any = None  # WatchdogConfig
    metrics: Any = None  # MetricsConfig
    tune: Any = None  # TuneConfig
    job: JobConfig = field(default_factory=JobConfig)  # JobConfig
    # auto: the newest complete checkpoint of the run directory; never; or the path of a
    # checkpoint folder (.../checkpoints/step-N).
    resume: str = "auto"


# (group, name in the ConfigStore, schema). The YAML files name these in their defaults.
SCHEMAS: tuple[tuple[str | None, str, type], ...] = (
    (None, "base_config", RootConfig),
    ("cluster", "base_cluster", ClusterConfig),
    ("resources", "base_resources", ResourcesConfig),
    ("parallel", "base_parallel", ParallelConfig),
    ("train", "base_train", TrainConfig),
    ("loader", "base_loader", LoaderConfig),
    ("eval", "base_eval", EvalConfig),
    ("loss", "base_loss", LossConfig),
    ("optim", "base_adamw", AdamWConfig),
    ("optim", "base_sgd", SGDConfig),
    ("checkpoint", "base_checkpoint", CheckpointConfig),
    ("preemption", "base_preemption", PreemptionConfig),
    ("watchdog", "base_watchdog", WatchdogConfig),
    ("metrics", "base_metrics", MetricsConfig),
    ("tune", "base_tune", TuneConfig),
    ("model", "base_mlp", MLPConfig),
    ("model", "base_gpt", GPTConfig),
    ("data", "base_synthetic", SyntheticConfig),
    ("data", "base_stdlib_text", StdlibTextConfig),
    ("data", "base_token_file", TokenFileConfig),
    ("model", "base_causal_lm", CausalLMConfig),
    ("data", "base_image_folder", ImageFolderConfig),
    ("model", "base_image_cnn", ImageCNNConfig),
)


# Sections whose schema does not depend on a value; optim, model and data are looked up.
_FIXED = {
    "cluster": ClusterConfig,
    "resources": ResourcesConfig,
    "parallel": ParallelConfig,
    "train": TrainConfig,
    "loader": LoaderConfig,
    "eval": EvalConfig,
    "loss": LossConfig,
    "checkpoint": CheckpointConfig,
    "preemption": PreemptionConfig,
    "watchdog": WatchdogConfig,
    "metrics": MetricsConfig,
    "tune": TuneConfig,
    "job": JobConfig,
}
_BY_NAME = {"adamw": AdamWConfig, "sgd": SGDConfig}
_BY_TARGET = {
    schema._target_: schema
    for schema in (
        MLPConfig,
        GPTConfig,
        CausalLMConfig,
        SyntheticConfig,
        StdlibTextConfig,
        TokenFileConfig,
        ImageFolderConfig,
        ImageCNNConfig,
    )
}
# data=token_dicts: the same keys as data=token_file, the windows as Hugging Face dicts.
_BY_TARGET["jeanzay_kit.examples.tokens.TokenDicts"] = TokenFileConfig


def schema_of(section: str, node: Any) -> type | None:
    """The schema a composed section was checked against (None: an untyped user node)."""
    if section in _FIXED:
        return _FIXED[section]
    if not isinstance(node, dict):
        return None
    if section == "optim":
        return _BY_NAME.get(node.get("name"))  # type: ignore[arg-type]
    if section in ("model", "data"):
        return _BY_TARGET.get(node.get("_target_"))  # type: ignore[arg-type]
    return None


def default(key: str) -> Any:
    """The schema's default of `section.field` (e.g. "loader.num_workers"): what a rule
    falls back on when a plain-dict config leaves the key out."""
    section, name = key.split(".", 1)
    value = getattr(_FIXED[section](), name)
    return list(value) if isinstance(value, tuple) else value


def unknown_keys(config: dict[str, Any]) -> list[tuple[str, str | None, str]]:
    """(dotted key, closest known key or None, schema name) for every key no schema has.

    Hydra refuses them while composing, except those added with `+key=value`, which
    bypasses the schema; this catches those, and keys of a config given as plain dicts.
    """
    from dataclasses import fields

    known_root = [f.name for f in fields(RootConfig)]
    out: list[tuple[str, str | None, str]] = []
    for key, node in config.items():
        if key not in known_root:
            out.append((key, closest(key, known_root), RootConfig.__name__))
            continue
        schema = schema_of(key, node)
        if schema is None or not isinstance(node, dict):
            continue
        names = [f.name for f in fields(schema)]
        for sub in node:
            if sub not in names:
                near = closest(sub, names)
                out.append((f"{key}.{sub}", f"{key}.{near}" if near else None, schema.__name__))
    return out


def closest(word: str, candidates: list[str]) -> str | None:
    """The known key a misspelt one most likely meant, for "did you mean" hints."""
    near = difflib.get_close_matches(word, candidates, n=1, cutoff=0.6)
    return near[0] if near else None
