"""Validators of how the job runs: job names and paths, the loop, the optimizer,
checkpoints, preemption and the process group. Every key that reaches torch is checked
here, with the usual `key=value reason. HINT: fix`. Pure; see config/collector.py."""

from __future__ import annotations

import re
from collections.abc import Mapping

from jeanzay_kit.config.collector import CONTROL, Collector, complete
from jeanzay_kit.config.entry import ENTRY_KINDS
from jeanzay_kit.config.schema import AdamWConfig, default
from jeanzay_kit.config.sections import (
    WRITER_THREADS_MAX,
    CheckpointSettings,
    Communication,
    JobSettings,
    MetricsSettings,
    OptimSettings,
    PreemptionSettings,
    TrainLoop,
    WatchdogSettings,
)
from jeanzay_kit.ending.codes import SLURM_NAMES
from jeanzay_kit.values import strings

OPTIMIZERS = ("adamw", "sgd")
SIGNALS = SLURM_NAMES  # preemption.signal: what Slurm sends ahead of the end
BACKENDS = ("auto", "nccl", "gloo")


def resolve_python(
    value: str, pytorch_module: str | None, interpreter: str | None, container: bool = False
) -> str:
    """job.python=auto: the interpreter that ran `jzk` (an absolute path, as submitit
    does), so every task imports what it imported whatever `module purge` leaves on the
    node's PATH; with the profile's PyTorch module, that module's own `python` (loading it
    puts it first on PATH), and in a container (job.container) the image's `python`. Any
    other value is the user's, as given."""
    if value != "auto":
        return value
    if pytorch_module or container or not interpreter:
        return "python"
    return interpreter


def check_job(c: Collector, job: Mapping[str, object]) -> JobSettings | None:
    name = _job_name(c, job.get("name"))
    log_dir, python, entry = (
        c.line(f"job.{k}", job.get(k)) for k in ("log_dir", "python", "entry")
    )
    workdir = job.get("workdir")
    if workdir is not None and (
        not isinstance(workdir, str) or not workdir.startswith("/") or CONTROL.search(workdir)
    ):
        c.add(
            "job.workdir",
            workdir,
            "must be an absolute path (Slurm does not expand ~ or $VARIABLES in --chdir)",
            "use e.g. job.workdir=/path/to/project, or job.workdir=null for the directory "
            "you render from",
        )
        return None
    snapshot, include = _snapshot(c, job)
    args, resume_args, may_change, outputs = (
        _arguments(c, f"job.{key}", job.get(key, default(f"job.{key}")), example)
        for key, example in (
            ("args", '["--epochs=10","--lr=0.1"]'),
            ("resume_args", '["--init_from=resume"]'),
            ("args_may_change", '["--log_level"]'),
            ("script_outputs", '["out","*.pt"]'),
        )
    )
    kind = c.choice(
        "job.entry_kind",
        job.get("entry_kind", default("job.entry_kind")),
        ENTRY_KINDS,
        "auto: the default entry is the toolkit's loop and any other your own command; "
        "toolkit: a Hydra application of yours that calls the toolkit",
    )
    dependency = _dependency(c, job.get("dependency"))
    sbatch_args = _pass_through(c, "job.sbatch_args", job.get("sbatch_args"), SBATCH_OWNED)
    srun_args = _pass_through(c, "job.srun_args", job.get("srun_args"), SRUN_OWNED)
    return complete(
        JobSettings,
        nullable=("workdir", "snapshot", "dependency"),
        dependency=dependency,
        sbatch_args=sbatch_args,
        srun_args=srun_args,
        name=name,
        log_dir=log_dir,
        python=python,
        entry=entry,
        workdir=workdir,
        snapshot=snapshot,
        snapshot_include=include,
        args=args,
        entry_kind=kind,
        resume_args=resume_args,
        args_may_change=may_change,
        script_outputs=outputs,
        **_snapshot_limits(c, job),
    )


def _snapshot_limits(c: Collector, job: Mapping[str, object]) -> dict[str, int | None]:
    """job.snapshot_max_file_bytes and job.snapshot_max_folder_files: positive numbers."""
    return {
        key: c.positive_int(f"job.{key}", job.get(key, default(f"job.{key}")))
        for key in ("snapshot_max_file_bytes", "snapshot_max_folder_files")
    }


# sbatch's --dependency types (sbatch(1)); `singleton` takes no job id.
DEPENDENCY_TYPES = ("after", "afterany", "afterok", "afternotok", "aftercorr", "singleton")
_DEPENDENCY = re.compile(r"^(singleton|[a-z]+(:\d+(_\d+)?(\+\d+)?)+)$")


def _dependency(c: Collector, value: object) -> str | None:
    """job.dependency: one or more `type:jobid[:jobid]` joined by ',' (all) or '?' (any)."""
    if value is None or value == "":
        return None
    text = str(value)
    parts = re.split(r"[,?]", text)
    bad = [p for p in parts if not _DEPENDENCY.match(p) or p.split(":")[0] not in DEPENDENCY_TYPES]
    if bad:
        c.add(
            "job.dependency",
            value,
            f"{bad[0]!r} is not a Slurm dependency (types: {', '.join(DEPENDENCY_TYPES)})",
            "use e.g. job.dependency=afterany:1234 (after job 1234 ends) or "
            "job.dependency=afterok:1234:1235",
        )
        return None
    return text


# The sbatch options the toolkit writes itself, and what sets each: a pass-through copy
# would contradict the validated request (slurm/flags.py, slurm/sbatch.py).
_GPUS = "resources.gpus_per_node"
SBATCH_OWNED = {
    "job-name": "job.name",
    "account": "cluster.account",
    "partition": "resources.partition",
    "constraint": "resources.constraint",
    "qos": "resources.qos",
    "nodes": "resources.nodes",
    "ntasks": _GPUS,
    "ntasks-per-node": _GPUS,
    "gpus": _GPUS,
    "gpus-per-node": _GPUS,
    "gres": _GPUS,
    "cpus-per-task": "resources.cpus_per_task",
    "mem": "resources.mem",
    "hint": "cluster.hint",
    "time": "resources.time",
    "signal": "preemption.signal",
    "requeue": "preemption.requeue",
    "no-requeue": "preemption.requeue",
    "dependency": "job.dependency",
    "array": "`jzk render --array`",
    "output": "job.log_dir",
    "error": "job.log_dir",
    "chdir": "job.workdir",
    "open-mode": "the toolkit (a requeued job appends to its logs)",
    "hold": "`jzk submit --hold`",
}
SRUN_OWNED = {
    "kill-on-bad-exit": "the toolkit (one failed task ends the step)",
    "nodes": "resources.nodes",
    "ntasks": _GPUS,
    "ntasks-per-node": _GPUS,
    "cpus-per-task": "resources.cpus_per_task",
    "gpus": _GPUS,
    "gpus-per-node": _GPUS,
    "gres": _GPUS,
}


def _pass_through(
    c: Collector, key: str, value: object, owned: Mapping[str, str]
) -> tuple[str, ...]:
    """job.sbatch_args / job.srun_args: long options (`--name` or `--name=value`), none
    of those the toolkit sets itself (each refusal names the key that sets it)."""
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)) or not all(isinstance(a, str) for a in value):
        c.add(key, value, "must be a list of options", f"use e.g. {key}='[\"--mail-type=END\"]'")
        return ()
    for arg in value:
        name = arg[2:].split("=", 1)[0]
        if not arg.startswith("--") or not name or CONTROL.search(arg):
            c.add(
                key,
                arg,
                "is not a long option (--name or --name=value)",
                f"use the long form, e.g. {key}='[\"--exclude=n1\"]'",
            )
        elif name in owned:
            c.add(key, arg, f"is set by {owned[name]}", f"set {owned[name]} instead")
    return tuple(value)


def _job_name(c: Collector, name: object) -> str | None:
    if not isinstance(name, str) or not name.strip():
        c.add("job.name", name, "must be a non-empty name", "use e.g. job.name=my_run")
        return None
    if CONTROL.search(name) or "/" in name:
        c.add(
            "job.name",
            name,
            "contains a control character or '/'",
            "use letters, digits, '-', '_' or '.'",
        )
        return None
    return name


def _snapshot(c: Collector, job: Mapping[str, object]) -> tuple[bool | None, tuple[str, ...]]:
    """job.snapshot (true, false or null: on Slurm profiles) and job.snapshot_include."""
    snapshot = job.get("snapshot")
    if snapshot is not None and not isinstance(snapshot, bool):
        c.add("job.snapshot", snapshot, "must be true, false or null", "use job.snapshot=false")
        snapshot = None
    asked = job.get("snapshot_include") or ()
    if not isinstance(asked, (list, tuple)) or not all(isinstance(g, str) and g for g in asked):
        c.add(
            "job.snapshot_include",
            asked,
            "must be a list of glob patterns",
            "use e.g. job.snapshot_include='[**/*.py,conf/**/*.yaml]'",
        )
        return snapshot, ()
    return snapshot, strings(asked)


def _arguments(c: Collector, key: str, value: object, example: str) -> tuple[str, ...]:
    """A list of command-line arguments (numbers become their text), or () with an error."""
    given = value or ()
    if not isinstance(given, (list, tuple)) or not all(
        isinstance(a, (str, int, float)) for a in given
    ):
        c.add(
            key,
            value,
            "must be a list of arguments",
            f"use e.g. {key}='{example}', or put the arguments after `--` "
            "(jzk train|submit|render [OVERRIDES] -- ARGS...)",
        )
        return ()
    return tuple(str(a) for a in given)


def check_train_loop(c: Collector, train: Mapping[str, object]) -> TrainLoop | None:
    """train.* beyond the batch sizes and precision (config/layout_rules.py has those)."""
    # 0 is allowed: the initial model, saved as model_final.pt (tests compare it).
    steps = c.positive_int("train.steps", train.get("steps"), minimum=0)
    seed = c.positive_int("train.seed", train.get("seed"), minimum=0)
    log_every = c.positive_int("train.log_every", train.get("log_every"))
    eval_every = c.positive_int("train.eval_every", train.get("eval_every"), minimum=0)
    given_batches = train.get("eval_batches")
    eval_batches = (
        None if given_batches is None else c.positive_int("train.eval_batches", given_batches, 0)
    )
    eval_fraction = c.number(
        "train.eval_fraction", train.get("eval_fraction"), 0, 1, high_open=True, example=0.05
    )
    checkpointing = c.flag("train.activation_checkpointing", train.get("activation_checkpointing"))
    compile_ = c.auto_flag("train.compile", train.get("compile"))  # None: auto
    tf32 = c.flag("train.tf32", train.get("tf32", default("train.tf32")))
    nonfinite = c.choice("train.nonfinite", train.get("nonfinite"), NONFINITE_CHOICES)
    if (
        steps is None
        or seed is None
        or log_every is None
        or eval_every is None
        or (given_batches is not None and eval_batches is None)
        or eval_fraction is None
        or checkpointing is None
        or tf32 is None
        or nonfinite is None
    ):
        return None
    return TrainLoop(
        steps=steps,
        seed=seed,
        log_every=log_every,
        eval_every=eval_every,
        eval_batches=eval_batches,
        eval_fraction=eval_fraction,
        activation_checkpointing=checkpointing,
        compile=compile_,
        tf32=tf32,
        nonfinite=nonfinite,
    )


def check_optim(c: Collector, optim: Mapping[str, object]) -> OptimSettings | None:
    name = c.choice("optim.name", optim.get("name"), OPTIMIZERS)
    values: dict[str, object] = {
        "lr": c.number("optim.lr", optim.get("lr"), 0, low_open=True, example=0.001),
        "weight_decay": c.number("optim.weight_decay", optim.get("weight_decay"), 0),
        "warmup_steps": c.positive_int("optim.warmup_steps", optim.get("warmup_steps"), 0),
        "min_lr_ratio": c.number("optim.min_lr_ratio", optim.get("min_lr_ratio"), 0, 1),
        "grad_clip": c.number("optim.grad_clip", optim.get("grad_clip"), 0, example=1.0),
    }
    fused = c.auto_flag("optim.fused", optim.get("fused", AdamWConfig().fused))
    extra: dict[str, object] = {}
    if name == "sgd":
        extra["momentum"] = c.number(
            "optim.momentum", optim.get("momentum"), 0, 1, high_open=True, example=0.9
        )
    elif name == "adamw":
        betas = optim.get("betas")
        if not isinstance(betas, (list, tuple)) or len(betas) != 2:
            c.add("optim.betas", betas, "must be two numbers", "use optim.betas=[0.9,0.95]")
            extra["betas"] = None
        else:
            checked = [
                c.number("optim.betas", b, 0, 1, high_open=True, example="[0.9,0.95]")
                for b in betas
            ]
            extra["betas"] = None if None in checked else tuple(checked)
    return complete(OptimSettings, nullable=("fused",), name=name, fused=fused, **values, **extra)


WRITE_ERROR_CHOICES = ("stop", "continue")
NONFINITE_CHOICES = ("stop", "skip")


def check_checkpoint(
    c: Collector, ckpt: Mapping[str, object], run_dir: object, resume: object
) -> CheckpointSettings | None:
    threads = _writer_threads(c, ckpt.get("writer_threads"))
    raw_minutes = ckpt.get("every_minutes")  # null: no time-based saves
    every_minutes = None
    if raw_minutes is not None:
        every_minutes = c.number(
            "checkpoint.every_minutes", raw_minutes, 0, low_open=True, example=30
        )
    settings = complete(
        CheckpointSettings,
        # null: no time-based saves; in the run dir; one writer thread per core
        nullable=("every_minutes", "dir", "writer_threads"),
        run_dir=c.line("job.run_dir", run_dir, "use e.g. job.run_dir=outputs/my_run"),
        resume=c.line(
            "resume", resume, "use resume=auto, resume=never or the path of a step-N folder"
        ),
        every_steps=c.positive_int("checkpoint.every_steps", ckpt.get("every_steps"), minimum=0),
        every_minutes=every_minutes,
        keep_last=c.positive_int("checkpoint.keep_last", ckpt.get("keep_last")),
        use_async=c.flag("checkpoint.async", ckpt.get("async")),
        allow_config_change=c.flag(
            "checkpoint.allow_config_change", ckpt.get("allow_config_change")
        ),
        on_write_error=c.choice(
            "checkpoint.on_write_error", ckpt.get("on_write_error"), WRITE_ERROR_CHOICES
        ),
        dir=None
        if ckpt.get("dir") is None
        else c.line("checkpoint.dir", ckpt.get("dir"), "e.g. checkpoint.dir=$SCRATCH/ckpt"),
        writer_threads=threads,
    )
    usable = raw_minutes is None or every_minutes is not None
    return settings if usable and (ckpt.get("writer_threads") is None or threads) else None


def _writer_threads(c: Collector, value: object) -> int | None:
    """checkpoint.writer_threads: null (one per core), or 1 to WRITER_THREADS_MAX."""
    key = "checkpoint.writer_threads"
    threads = None if value is None else c.positive_int(key, value)
    if threads is not None and threads > WRITER_THREADS_MAX:
        most = WRITER_THREADS_MAX
        fix = f"use {key}=1 to {most}, or null (one per core, up to {most})"
        c.add(key, value, f"is more than {WRITER_THREADS_MAX}", fix)
        return None
    return threads


def check_preemption(c: Collector, pre: Mapping[str, object]) -> PreemptionSettings | None:
    signal = c.choice(
        "preemption.signal", str(pre.get("signal")).upper().removeprefix("SIG"), SIGNALS
    )
    lead = c.positive_int("preemption.lead_seconds", pre.get("lead_seconds"), minimum=0)
    wait = c.positive_int("preemption.term_wait_seconds", pre.get("term_wait_seconds"), 0)
    requeue = c.flag("preemption.requeue", pre.get("requeue"))
    restarts = c.positive_int("preemption.max_restarts", pre.get("max_restarts"), minimum=0)
    if signal is None or lead is None or wait is None or requeue is None or restarts is None:
        return None
    return PreemptionSettings(signal, lead, wait, requeue, restarts)


def check_watchdog(c: Collector, dog: Mapping[str, object]) -> WatchdogSettings | None:
    stall = c.number("watchdog.stall_seconds", dog.get("stall_seconds"), 0, example=300)
    beat = c.number(
        "watchdog.heartbeat_seconds", dog.get("heartbeat_seconds"), 0, low_open=True, example=2
    )
    gate = c.flag("watchdog.health_gate", dog.get("health_gate", default("watchdog.health_gate")))
    if stall is None or beat is None or gate is None:
        return None
    if stall and beat * 3 > stall:
        c.add(
            "watchdog.heartbeat_seconds",
            dog.get("heartbeat_seconds"),
            f"is above a third of watchdog.stall_seconds={stall:g}: a live rank could look "
            "frozen between two beats",
            f"use watchdog.heartbeat_seconds={stall / 10:g} or a larger stall_seconds",
        )
        return None
    return WatchdogSettings(stall, beat, gate)


WANDB_MODES = ("offline", "online")


def check_metrics(c: Collector, met: Mapping[str, object]) -> MetricsSettings | None:
    before = len(c.problems)
    flags = [c.flag(f"metrics.{k}", met.get(k)) for k in ("tensorboard", "wandb", "mlflow")]
    mode = c.choice("metrics.wandb_mode", met.get("wandb_mode"), WANDB_MODES)
    names = {
        key: _optional_line(c, f"metrics.{key}", met.get(key))
        for key in ("wandb_project", "wandb_entity", "mlflow_uri", "mlflow_experiment")
    }
    if len(c.problems) > before:
        return None
    tensorboard, wandb, mlflow = (bool(f) for f in flags)
    return MetricsSettings(tensorboard, wandb=wandb, wandb_mode=str(mode), mlflow=mlflow, **names)


def _optional_line(c: Collector, key: str, value: object) -> str | None:
    """null, or a one-line name (a tracker's project, URI, experiment)."""
    return None if value is None else c.line(key, value, f"use {key}=null for the default")


def check_communication(
    c: Collector, par: Mapping[str, object], device: str
) -> Communication | None:
    backend = c.choice("parallel.backend", par.get("backend"), BACKENDS)
    if backend == "nccl" and device == "cpu":
        c.add(
            "parallel.backend",
            backend,
            "but this cluster trains on the CPU, and NCCL needs GPUs",
            "use parallel.backend=auto (gloo on CPU)",
        )
    timeout = c.number(
        "parallel.timeout_minutes", par.get("timeout_minutes"), 0, low_open=True, example=10
    )
    bucket = c.number(
        "parallel.bucket_cap_mb", par.get("bucket_cap_mb"), 0, low_open=True, example=25
    )
    if backend is None or timeout is None or bucket is None:
        return None
    return Communication(backend, timeout, bucket)
