"""The composed config -> one frozen, validated JobSpec, or one SpecError listing every problem.

Pure: takes the resolved config as plain dicts (the CLI and train.py compose it with
Hydra), checks everything Slurm would reject or a job would hang on, and resolves the
automatic choices (QoS from the time, CPUs per task from the node's share, precision
from the hardware, gradient accumulation from the batch sizes). Nothing is submitted
until this passes, so a mistake costs a second, not a queue wait.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from jeanzay_kit.config.clusters import (
    ClusterProfile,
    Partition,
    Qos,
    mem_megabytes,
    profile_from_dict,
)
from jeanzay_kit.distributed.layout import ParallelLayout
from jeanzay_kit.errors import Problem, SpecError
from jeanzay_kit.slurm_syntax.timefmt import TimeFormatError, format_time, parse_time

MODES = ("ddp", "fsdp", "pipeline", "pipeline_ddp", "dataparallel")
SCHEDULES = ("gpipe", "1f1b", "interleaved_1f1b")
LAUNCHERS = ("srun", "torchrun")
PRECISIONS = ("auto", "bf16", "fp16", "fp32")
SIGNALS = ("USR1", "USR2", "TERM")
PIPELINE_MODES = ("pipeline", "pipeline_ddp")

# Control characters would end an #SBATCH line and start a shell command.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


# sbatch(1) --signal: the warning "may be sent up to 60 seconds earlier than specified".
SIGNAL_EARLY_S = 60
# The least time a job gets before the earliest possible warning (start-up included).
MIN_WORK_BEFORE_WARNING_S = 30


def _minutes_for_warning(lead: int) -> int:
    return -(-(lead + SIGNAL_EARLY_S + MIN_WORK_BEFORE_WARNING_S) // 60)  # ceiling


@dataclass(frozen=True)
class JobSpec:
    """Everything needed to submit and run one job, validated and resolved."""

    cluster: ClusterProfile
    job_name: str
    log_dir: str
    python: str
    entry: str
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
    layout: ParallelLayout
    global_batch_size: int
    micro_batch_size: int
    grad_accum_steps: int
    precision: str  # resolved: bf16 | fp16 | fp32, or "auto" on cluster=local (decided at run time)
    signal: str
    signal_lead_seconds: int
    # After saving on SIGTERM in a Slurm job: how long to wait for Slurm to end the job
    # (a preempted job is requeued by Slurm only if it has not ended by itself).
    term_wait_seconds: int
    requeue: bool
    config: Mapping[str, Any]  # the whole resolved config, frozen into the job
    # The job's working directory (#SBATCH --chdir); None: where the script is rendered.
    workdir: str | None = None
    # Keys whose value was chosen automatically ("resources.qos", ...), for display only.
    auto_keys: tuple[str, ...] = field(default=(), compare=False)

    @property
    def time(self) -> str:
        return format_time(self.time_minutes)

    @property
    def total_gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def omp_num_threads(self) -> int:
        """Threads per training process: the task's CPUs shared by the processes it runs."""
        procs_per_task = self.gpus_per_node if self.layout.launcher == "torchrun" else 1
        return max(1, self.cpus_per_task // procs_per_task)


class _Collector:
    """Gathers every problem, so one run of `jzk validate` shows them all."""

    def __init__(self) -> None:
        self.problems: list[Problem] = []

    def add(self, key: str, value: object, reason: str, hint: str = "") -> None:
        self.problems.append(Problem(key, value, reason, hint))

    def positive_int(self, key: str, value: object, minimum: int = 1) -> int | None:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, str) and value.strip().lstrip("+").isdigit():
                value = int(value)
            else:
                self.add(key, value, "is not a whole number", f"use e.g. {key}={minimum}")
                return None
        if value < minimum:
            self.add(key, value, f"must be at least {minimum}", f"use {key}={minimum} or more")
            return None
        return value

    def choice(self, key: str, value: object, choices: tuple[str, ...]) -> str | None:
        if value not in choices:
            self.add(key, value, f"is not one of {', '.join(choices)}", f"use {key}={choices[0]}")
            return None
        return str(value)

    def raise_if_any(self) -> None:
        if self.problems:
            raise SpecError(self.problems)


def _section(cfg: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    node = cfg.get(name)
    if not isinstance(node, Mapping):
        raise SpecError(
            Problem(
                name,
                node,
                "is missing from the config",
                f"the root config must have a `{name}` section",
            )
        )
    return node


# CPU worker processes a local run starts when there is no GPU: two, so that even a
# laptop run exercises the real distributed path (gloo, all-reduce, sharding).
LOCAL_CPU_WORKERS = 2


def build_job_spec(cfg: Mapping[str, Any], local_gpus: int | None = None) -> JobSpec:
    """Validate the resolved config (plain dicts) and return the frozen JobSpec.

    local_gpus: GPUs visible on this machine, for resources.gpus_per_node=auto on
    cluster=local (one worker per GPU, or LOCAL_CPU_WORKERS without a GPU). The caller
    detects them; this function stays pure.
    """
    cluster = profile_from_dict(_section(cfg, "cluster"))
    res = _section(cfg, "resources")
    par = _section(cfg, "parallel")
    train = _section(cfg, "train")
    job = _section(cfg, "job")
    pre = cfg.get("preemption") or {}
    c = _Collector()

    # ---- plain values -----------------------------------------------------------------
    job_name = job.get("name")
    if not isinstance(job_name, str) or not job_name.strip():
        c.add("job.name", job_name, "must be a non-empty name", "use e.g. job.name=my_run")
    elif _CONTROL.search(job_name) or "/" in job_name:
        c.add(
            "job.name",
            job_name,
            "contains a control character or '/'",
            "use letters, digits, '-', '_' or '.'",
        )
    for key in ("log_dir", "python", "entry"):
        value = job.get(key)
        if not isinstance(value, str) or not value.strip() or _CONTROL.search(value):
            c.add(f"job.{key}", value, "must be a non-empty single-line string")
    workdir = job.get("workdir")
    if workdir is not None and (
        not isinstance(workdir, str) or not workdir.startswith("/") or _CONTROL.search(workdir)
    ):
        c.add(
            "job.workdir",
            workdir,
            "must be an absolute path (Slurm does not expand ~ or $VARIABLES in --chdir)",
            "use e.g. job.workdir=/path/to/project, or job.workdir=null for the directory "
            "you render from",
        )
        workdir = None
    nodes = c.positive_int("resources.nodes", res.get("nodes"))
    raw_gpn = res.get("gpus_per_node", "auto")
    if raw_gpn in (None, "auto"):
        # On a cluster, one GPU: the smallest request, scaled up explicitly. On this
        # machine, every visible GPU, or LOCAL_CPU_WORKERS processes without one.
        raw_gpn = 1 if cluster.is_slurm else (local_gpus or LOCAL_CPU_WORKERS)
    gpn = c.positive_int("resources.gpus_per_node", raw_gpn)
    minutes: int | None = None
    try:
        minutes = parse_time(res.get("time"))
    except TimeFormatError as err:
        c.add(
            "resources.time",
            res.get("time"),
            f"is not a Slurm time: {err}",
            'use HH:MM:SS, e.g. resources.time="10:00:00", or D-HH:MM:SS',
        )
    mem = res.get("mem")
    if mem is not None and not re.fullmatch(r"\d+[KMGT]?", str(mem)):
        c.add("resources.mem", mem, "is not a Slurm memory size", "use e.g. resources.mem=64G")

    mode = c.choice("parallel.mode", par.get("mode"), MODES)
    launcher = c.choice("parallel.launcher", par.get("launcher", "srun"), LAUNCHERS)
    schedule = c.choice("parallel.schedule", par.get("schedule", "1f1b"), SCHEDULES)
    stages = c.positive_int("parallel.pipeline_stages", par.get("pipeline_stages", 1))
    microbatches = c.positive_int("parallel.microbatches", par.get("microbatches", 1))
    stages_per_rank = c.positive_int("parallel.stages_per_rank", par.get("stages_per_rank", 2))
    gbs = c.positive_int("train.global_batch_size", train.get("global_batch_size"))
    mbs = c.positive_int("train.micro_batch_size", train.get("micro_batch_size"))
    precision = c.choice("train.precision", train.get("precision", "auto"), PRECISIONS)
    c.choice("optim.name", (cfg.get("optim") or {}).get("name", "adamw"), ("adamw", "sgd"))
    signal = c.choice(
        "preemption.signal", str(pre.get("signal", "USR1")).upper().removeprefix("SIG"), SIGNALS
    )
    lead = c.positive_int("preemption.lead_seconds", pre.get("lead_seconds", 120), minimum=0)
    term_wait = c.positive_int(
        "preemption.term_wait_seconds", pre.get("term_wait_seconds", 300), minimum=0
    )
    c.raise_if_any()  # the checks below need the values above
    assert nodes and gpn and minutes and mode and launcher and schedule  # for the type checker
    assert stages and microbatches and stages_per_rank and gbs and mbs and precision
    assert signal and lead is not None and term_wait is not None

    # ---- where the job runs -------------------------------------------------------------
    cname = cluster.name
    if not cluster.is_slurm and nodes > 1:
        c.add(
            "resources.nodes",
            nodes,
            f"but cluster={cname} runs on this machine only (1 node)",
            "use a Slurm profile, e.g. cluster=jeanzay_h100, or resources.nodes=1",
        )

    partition_name = res.get("partition") or cluster.default_partition
    partition = cluster.partitions.get(partition_name)
    if partition is None:
        c.add(
            "resources.partition",
            partition_name,
            f"is not a partition of {cname} ({', '.join(cluster.partitions)})",
            f"use resources.partition={cluster.default_partition} or leave it null",
        )
        c.raise_if_any()
    assert partition is not None

    requested_constraint = res.get("constraint")
    constraint = requested_constraint or partition.default_constraint
    if requested_constraint and not cluster.is_slurm:
        c.add(
            "resources.constraint",
            requested_constraint,
            f"means nothing on cluster={cname}",
            "leave resources.constraint=null",
        )
    elif (
        requested_constraint
        and partition.constraints
        and (requested_constraint not in partition.constraints)
    ):
        c.add(
            "resources.constraint",
            requested_constraint,
            f"is not a constraint of {cname} partition {partition.name} "
            f"({', '.join(partition.constraints)})",
            f"use resources.constraint={partition.constraints[0]} or leave it null",
        )
    elif requested_constraint and _CONTROL.search(str(requested_constraint)):
        c.add("resources.constraint", requested_constraint, "contains control characters")

    too_many_gpus = partition.gpus_per_node is not None and gpn > partition.gpus_per_node
    if too_many_gpus:
        want_nodes = math.ceil(nodes * gpn / partition.gpus_per_node)
        c.add(
            "resources.gpus_per_node",
            gpn,
            f"but {cname} nodes have {partition.gpus_per_node} GPUs",
            f"use resources.nodes={want_nodes} resources.gpus_per_node={partition.gpus_per_node}",
        )

    # ---- tasks and CPUs -----------------------------------------------------------------
    one_task_per_node = launcher == "torchrun" or mode == "dataparallel"
    ntasks_per_node = 1 if one_task_per_node else gpn
    gpus_per_task = gpn if one_task_per_node else 1
    share = partition.cpus_per_gpu * gpus_per_task if partition.cpus_per_gpu else None
    raw_cpus = res.get("cpus_per_task", "auto")
    cpus: int | None
    if raw_cpus in (None, "auto"):
        cpus = share or 1  # Slurm's own default is one CPU per task
    else:
        cpus = c.positive_int("resources.cpus_per_task", raw_cpus)
        if cpus is not None and share is not None and cpus > share:
            c.add(
                "resources.cpus_per_task",
                cpus,
                f"is above the node's share for {gpus_per_task} GPU(s) per task on {cname} "
                f"({partition.cpus_per_gpu} CPUs per GPU, so at most {share}); "
                "extra cores are charged as GPU hours and can leave GPUs unallocatable",
                f"use resources.cpus_per_task={share} or resources.cpus_per_task=auto",
            )
    if (
        cpus is not None
        and not too_many_gpus  # the GPU problem above already says what to change
        and partition.cpus_per_node is not None
        and cpus * ntasks_per_node > partition.cpus_per_node
        and (share is None or cpus <= share)
    ):
        c.add(
            "resources.cpus_per_task",
            cpus,
            f"x {ntasks_per_node} tasks per node is above the {partition.cpus_per_node} "
            f"CPUs of a {cname} node",
            f"use resources.cpus_per_task={partition.cpus_per_node // ntasks_per_node}"
            if partition.cpus_per_node >= ntasks_per_node
            else f"use at most {partition.cpus_per_node} tasks per node, e.g. "
            f"resources.gpus_per_node={partition.cpus_per_node}",
        )

    mem_mb = mem_megabytes(mem) if mem is not None else None
    if mem_mb is not None and partition.mem_per_node_mb and mem_mb > partition.mem_per_node_mb:
        c.add(
            "resources.mem",
            mem,
            f"is above the {partition.mem_per_node_mb}M of memory of a {cname} node",
            f"use resources.mem={partition.mem_per_node_mb}M or less, or resources.mem=null",
        )

    # ---- account ------------------------------------------------------------------------
    account = cluster.account
    if cluster.account_required and not account:
        example = f"<project>{cluster.account_suffix or ''}"
        c.add(
            "cluster.account",
            account,
            f"is not set, but {cname} charges every job to a project",
            f"use cluster.account={example} (`idracct` on Jean Zay lists your projects)",
        )
    elif account and (_CONTROL.search(account) or " " in account):
        c.add("cluster.account", account, "contains blanks or control characters")
    elif account and cluster.account_suffix and not account.endswith(cluster.account_suffix):
        project = account.split("@")[0]
        c.add(
            "cluster.account",
            account,
            f"does not end with {cluster.account_suffix}: {cname} hours are charged "
            f"to <project>{cluster.account_suffix}",
            f"use cluster.account={project}{cluster.account_suffix}",
        )

    # ---- time and QoS -------------------------------------------------------------------
    total_gpus = nodes * gpn
    over_partition = partition.max_minutes is not None and minutes > partition.max_minutes
    if over_partition:
        c.add(
            "resources.time",
            format_time(minutes),
            f"is above the {format_time(partition.max_minutes)} limit of {cname} "
            f"partition {partition.name}",
            f"use resources.time={format_time(partition.max_minutes)} or less, and resume "
            "from a checkpoint in a follow-up job",
        )
    qos = None
    if not over_partition:
        qos = _pick_qos(c, cluster, res.get("qos", "auto"), minutes, total_gpus)
    # A job too short for the lead (and Slurm's early sending) gets the warning while it
    # starts: it saves before its first step and requeues, again and again.
    earliest_warning_s = minutes * 60 - lead - SIGNAL_EARLY_S
    if cluster.is_slurm and earliest_warning_s < MIN_WORK_BEFORE_WARNING_S:
        c.add(
            "resources.time",
            format_time(minutes),
            f"leaves no time to train before the time-limit warning: Slurm sends "
            f"preemption.signal={signal} preemption.lead_seconds={lead} s before the end, "
            f"and up to {SIGNAL_EARLY_S} s earlier than that",
            f"use resources.time={format_time(_minutes_for_warning(lead))} or more, or a "
            "smaller preemption.lead_seconds",
        )

    # ---- parallel layout ----------------------------------------------------------------
    world = nodes * gpn
    pp = stages if mode in PIPELINE_MODES else 1
    if mode == "dataparallel":
        if nodes > 1:
            c.add(
                "resources.nodes",
                nodes,
                "but parallel.mode=dataparallel runs in one process on one node",
                "use parallel.mode=ddp for several nodes",
            )
        if launcher == "torchrun":
            c.add(
                "parallel.launcher",
                launcher,
                "but parallel.mode=dataparallel is one process driving every GPU",
                "use parallel.launcher=srun",
            )
        if mbs % gpn:
            c.add(
                "train.micro_batch_size",
                mbs,
                f"is not divisible by the {gpn} GPUs nn.DataParallel splits it over",
                f"use train.micro_batch_size={max(gpn, mbs - mbs % gpn)}",
            )
        dp = 1
    elif mode in PIPELINE_MODES:
        dp = world // stages if world % stages == 0 else 0
        if stages < 2:
            c.add(
                "parallel.pipeline_stages",
                stages,
                f"but parallel.mode={mode} needs at least 2",
                "use parallel.pipeline_stages=2, or parallel.mode=ddp",
            )
        elif mode == "pipeline" and stages != world:
            c.add(
                "parallel.pipeline_stages",
                stages,
                f"but resources.nodes x resources.gpus_per_node = {world} ranks; "
                "parallel.mode=pipeline puts one stage on each rank",
                f"use parallel.pipeline_stages={world}, or parallel.mode=pipeline_ddp "
                "for replicas of the pipeline",
            )
        elif world % stages:
            c.add(
                "parallel.pipeline_stages",
                stages,
                f"does not divide the world size {world} "
                f"(resources.nodes={nodes} x resources.gpus_per_node={gpn})",
                "use a divisor of the world size, e.g. "
                f"parallel.pipeline_stages={_divisor_near(world, stages)}",
            )
        # One schedule step runs microbatches x accumulation pipeline micro-batches.
        accum_guess = gbs // (dp * mbs) if dp and gbs % (dp * mbs) == 0 else 1
        total_mb = microbatches * accum_guess
        if schedule == "1f1b" and total_mb < stages:
            c.add(
                "parallel.microbatches",
                microbatches,
                f"x {accum_guess} accumulation step(s) is below parallel.pipeline_stages="
                f"{stages}; the 1F1B schedule needs at least one micro-batch per stage",
                f"use parallel.microbatches={-(-stages // accum_guess)}",
            )
        if schedule == "interleaved_1f1b":
            rounds = max(1, total_mb // stages)
            if total_mb % rounds:
                c.add(
                    "parallel.microbatches",
                    microbatches,
                    f"x {accum_guess} accumulation step(s) = {total_mb} micro-batches is not a "
                    f"multiple of the {rounds} rounds interleaved 1F1B makes of {stages} stages",
                    "use a multiple of parallel.pipeline_stages, e.g. "
                    f"parallel.microbatches={stages}",
                )
        if mbs % microbatches:
            c.add(
                "train.micro_batch_size",
                mbs,
                f"is not divisible by parallel.microbatches={microbatches} "
                "(each pipeline micro-batch must have the same size)",
                f"use train.micro_batch_size={microbatches * max(1, mbs // microbatches)}",
            )
    else:
        dp = world
    if mode == "pipeline_ddp" and dp == 1 and world % stages == 0 and stages >= 2:
        c.add(
            "parallel.mode",
            mode,
            f"but {world} ranks / {stages} stages leaves one replica",
            "use parallel.mode=pipeline, or more GPUs for several replicas",
        )

    grad_accum = 0
    if dp and gbs % (dp * mbs):
        c.add(
            "train.global_batch_size",
            gbs,
            f"is not divisible by data-parallel size {dp} x train.micro_batch_size={mbs} "
            f"(= {dp * mbs})",
            f"use train.global_batch_size={_multiple_near(gbs, dp * mbs)}",
        )
    elif dp:
        grad_accum = gbs // (dp * mbs)

    # ---- precision ----------------------------------------------------------------------
    resolved_precision = precision
    if precision == "bf16" and not cluster.bf16:
        c.add(
            "train.precision",
            precision,
            f"but {cname} GPUs have no bfloat16 support",
            "use train.precision=fp16 (with loss scaling) or train.precision=auto",
        )
    if precision == "fp16" and cluster.device == "cpu":
        c.add(
            "train.precision",
            precision,
            f"but {cname} trains on the CPU, where fp16 is slow and unsupported by many kernels",
            "use train.precision=fp32 or bf16",
        )
    if precision == "auto":
        if cluster.device == "cuda":
            resolved_precision = "bf16" if cluster.bf16 else "fp16"
        elif cluster.device == "cpu":
            resolved_precision = "fp32"

    c.raise_if_any()
    layout = ParallelLayout(
        mode,
        launcher,
        world if mode != "dataparallel" else 1,
        pp,
        dp,
        microbatches,
        schedule,
        stages_per_rank,
    )
    return JobSpec(
        cluster=cluster,
        job_name=job_name,
        log_dir=job["log_dir"],
        python=job["python"],
        entry=job["entry"],
        workdir=workdir,
        account=account,
        partition=partition,
        constraint=constraint,
        qos=qos,
        nodes=nodes,
        gpus_per_node=gpn,
        ntasks_per_node=ntasks_per_node,
        cpus_per_task=cpus or 1,
        time_minutes=minutes,
        mem=str(mem) if mem is not None else None,
        layout=layout,
        global_batch_size=gbs,
        micro_batch_size=mbs,
        grad_accum_steps=grad_accum,
        precision=resolved_precision,
        signal=signal,
        signal_lead_seconds=lead,
        term_wait_seconds=term_wait,
        requeue=bool(pre.get("requeue", True)),
        config=_resolved_config(cfg, gpn, cpus or 1, partition.name, constraint, qos),
        auto_keys=tuple(
            f"resources.{k}"
            for k in ("gpus_per_node", "cpus_per_task", "qos")
            if res.get(k, "auto") in (None, "auto")
        ),
    )


def _resolved_config(
    cfg: Mapping[str, Any],
    gpus: int,
    cpus: int,
    partition: str,
    constraint: str | None,
    qos: str | None,
) -> dict[str, Any]:
    """The config with the automatic choices written in, so the job re-validates to the
    same request on the nodes whatever machine it lands on."""
    out = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in cfg.items()}
    res = out["resources"]
    res["gpus_per_node"] = gpus
    res["cpus_per_task"] = cpus
    res["partition"] = partition
    res["constraint"] = constraint
    if qos is not None:
        res["qos"] = qos
    return out


def _pick_qos(
    c: _Collector, cluster: ClusterProfile, requested: object, minutes: int, total_gpus: int
) -> str | None:
    """Check a named QoS, or pick the shortest one that fits for qos=auto."""
    if not cluster.qos:  # the profile does not know the site's QoS: pass the name through
        if requested in (None, "auto"):
            return None
        if not isinstance(requested, str) or _CONTROL.search(requested) or " " in requested:
            c.add("resources.qos", requested, "is not a QoS name")
            return None
        return requested
    if requested in (None, "auto"):
        fitting = [q for q in cluster.qos_by_time() if _qos_fits(q, minutes, total_gpus)]
        if fitting:
            return fitting[0].name
        longest = cluster.qos_by_time()[-1]
        c.add(
            "resources.time",
            format_time(minutes),
            f"with {total_gpus} GPUs fits no QoS of {cluster.name} ({_qos_table(cluster)})",
            f"use resources.time={format_time(longest.max_minutes)} or less, or fewer GPUs",
        )
        return None
    qos = cluster.qos.get(str(requested))
    if qos is None:
        c.add(
            "resources.qos",
            requested,
            f"is not a QoS of {cluster.name} ({_qos_table(cluster)})",
            "use resources.qos=auto to pick the shortest QoS that fits",
        )
        return None
    if minutes > qos.max_minutes:
        longer = [q for q in cluster.qos_by_time() if _qos_fits(q, minutes, total_gpus)]
        hint = (
            f"use resources.qos={longer[0].name}"
            if longer
            else f"use resources.time={format_time(qos.max_minutes)} or less"
        )
        c.add(
            "resources.time",
            format_time(minutes),
            f"is above the {format_time(qos.max_minutes)} limit of QoS {qos.name}",
            hint,
        )
    if qos.max_gpus_per_job is not None and total_gpus > qos.max_gpus_per_job:
        c.add(
            "resources.qos",
            qos.name,
            f"allows {qos.max_gpus_per_job} GPUs per job but resources.nodes x "
            f"resources.gpus_per_node = {total_gpus}",
            f"use at most {qos.max_gpus_per_job} GPUs, or resources.qos=auto",
        )
    return qos.name


def _qos_fits(qos: Qos, minutes: int, gpus: int) -> bool:
    return minutes <= qos.max_minutes and (
        qos.max_gpus_per_job is None or gpus <= qos.max_gpus_per_job
    )


def _qos_table(cluster: ClusterProfile) -> str:
    parts = []
    for q in cluster.qos_by_time():
        limit = f" max {q.max_gpus_per_job} GPUs" if q.max_gpus_per_job else ""
        parts.append(f"{q.name} <= {format_time(q.max_minutes)}{limit}")
    return "; ".join(parts)


def _multiple_near(value: int, step: int) -> int:
    """The multiple of `step` nearest to `value` (at least `step`)."""
    return max(step, round(value / step) * step)


def _divisor_near(n: int, wanted: int) -> int:
    divisors = [d for d in range(2, n + 1) if n % d == 0] or [n]
    return min(divisors, key=lambda d: (abs(d - wanted), d))
