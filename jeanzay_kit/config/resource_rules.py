"""Validators of what the job asks Slurm for: partition, constraint, GPUs, CPUs, memory,
account, time and QoS, against the cluster profile. Pure; see config/collector.py."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from jeanzay_kit.config.clusters import ClusterProfile, Partition, Qos, mem_megabytes
from jeanzay_kit.config.collector import CONTROL, Collector
from jeanzay_kit.config.schema import default
from jeanzay_kit.config.sections import PreemptionSettings, Resources
from jeanzay_kit.errors import TimeFormatError
from jeanzay_kit.slurm_syntax.timefmt import format_time, parse_time

# sbatch(1) --signal: the warning "may be sent up to 60 seconds earlier than specified".
SIGNAL_EARLY_S = 60
# The least time a job gets before the earliest possible warning (start-up included).
MIN_WORK_BEFORE_WARNING_S = 30
# CPU worker processes a local run starts when there is no GPU: two, so that even a
# laptop run exercises the real distributed path (gloo, all-reduce, sharding).
LOCAL_CPU_WORKERS = 2


def check_counts(
    c: Collector, cluster: ClusterProfile, res: Mapping[str, object], local_gpus: int | None
) -> tuple[int | None, int | None, int | None, str | None]:
    """nodes, GPUs per node, minutes and memory, each on its own."""
    nodes = c.positive_int("resources.nodes", res.get("nodes"))
    raw_gpn = res.get("gpus_per_node", default("resources.gpus_per_node"))
    if raw_gpn in (None, "auto"):
        # On a cluster, one GPU: the smallest request, scaled up explicitly. On this
        # machine, every visible GPU, or LOCAL_CPU_WORKERS processes without one.
        raw_gpn = 1 if cluster.is_slurm else (local_gpus or LOCAL_CPU_WORKERS)
    gpn = c.positive_int("resources.gpus_per_node", raw_gpn)
    if not cluster.is_slurm and cluster.device != "cpu" and local_gpus and (gpn or 0) > local_gpus:
        # Seen on an H100: two ranks on the one GPU, and NCCL's init failed in rank 1.
        c.add(
            "resources.gpus_per_node",
            gpn,
            f"is more than the {local_gpus} GPU(s) this machine shows: a local run starts "
            "one process per GPU, and NCCL does not share a GPU between processes",
            f"use resources.gpus_per_node={local_gpus} (or auto), or cluster.device=cpu "
            "for CPU workers with gloo",
        )
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
    return nodes, gpn, minutes, (str(mem) if mem is not None else None)


def check_resources(
    c: Collector,
    cluster: ClusterProfile,
    res: Mapping[str, object],
    counts: tuple[int, int, int, str | None],
    one_task_per_node: bool,
    preemption: PreemptionSettings,
) -> Resources | None:
    """The whole request against the profile: partition, constraint, GPUs, CPUs, memory,
    account, time and QoS. None (with the problems collected) when it cannot be built."""
    nodes, gpn, minutes, mem = counts
    partition = check_partition(c, cluster, res, nodes)
    if partition is None:
        return None
    constraint = check_constraint(c, cluster, partition, res.get("constraint"))
    gpus_fit = check_gpus(c, cluster, partition, nodes, gpn)
    ntasks = 1 if one_task_per_node else gpn
    gpus_per_task = gpn if one_task_per_node else 1
    cpus = check_cpus(
        c,
        cluster,
        partition,
        raw_cpus=res.get("cpus_per_task", default("resources.cpus_per_task")),
        gpus_per_task=gpus_per_task,
        ntasks_per_node=ntasks,
        gpus_fit=gpus_fit,
    )
    check_mem(c, cluster, partition, mem)
    account = check_account(c, cluster)
    lead = (preemption.signal, preemption.lead_seconds)
    qos = check_time(
        c,
        cluster,
        partition,
        requested_qos=res.get("qos", default("resources.qos")),
        minutes=minutes,
        total_gpus=0 if partition.cpu_only else nodes * gpn,
        preemption=lead,
    )
    shortest = check_time_min(c, res.get("time_min"), minutes)
    return Resources(
        account, partition, constraint, qos, nodes, gpn, ntasks, cpus or 1, minutes, mem,
        shortest,
    )  # fmt: skip


def check_time_min(c: Collector, value: object, minutes: int) -> int | None:
    """resources.time_min: a Slurm time no longer than resources.time, or None."""
    if value is None:
        return None
    try:
        shortest = parse_time(value)
    except TimeFormatError as err:
        c.add("resources.time_min", value, f"is not a Slurm time: {err}", "use HH:MM:SS")
        return None
    if shortest > minutes:
        c.add(
            "resources.time_min",
            value,
            f"is longer than resources.time ({format_time(minutes)})",
            "the shortest limit the job accepts is at most its time limit",
        )
        return None
    return shortest


def check_partition(
    c: Collector, cluster: ClusterProfile, res: Mapping[str, object], nodes: int
) -> Partition | None:
    cname = cluster.name
    if not cluster.is_slurm and nodes > 1:
        c.add(
            "resources.nodes",
            nodes,
            f"but cluster={cname} runs on this machine only (1 node)",
            "use a Slurm profile, e.g. cluster=jeanzay_h100, or resources.nodes=1",
        )
    asked = res.get("partition")
    name = str(asked) if asked else cluster.default_partition
    partition = cluster.partitions.get(name)
    if partition is None:
        c.add(
            "resources.partition",
            name,
            f"is not a partition of {cname} ({', '.join(cluster.partitions)})",
            f"use resources.partition={cluster.default_partition} or leave it null",
        )
    return partition


def check_constraint(
    c: Collector, cluster: ClusterProfile, partition: Partition, requested: object
) -> str | None:
    cname = cluster.name
    if requested and not cluster.is_slurm:
        c.add(
            "resources.constraint",
            requested,
            f"means nothing on cluster={cname}",
            "leave resources.constraint=null",
        )
    elif requested and partition.constraints and requested not in partition.constraints:
        c.add(
            "resources.constraint",
            requested,
            f"is not a constraint of {cname} partition {partition.name} "
            f"({', '.join(partition.constraints)})",
            f"use resources.constraint={partition.constraints[0]} or leave it null",
        )
    elif requested and CONTROL.search(str(requested)):
        c.add("resources.constraint", requested, "contains control characters")
    return str(requested) if requested else partition.default_constraint


def check_gpus(
    c: Collector, cluster: ClusterProfile, partition: Partition, nodes: int, gpn: int
) -> bool:
    """False when the node has fewer GPUs than asked (the CPU checks then stay quiet)."""
    if partition.gpus_per_node is None or partition.cpu_only or gpn <= partition.gpus_per_node:
        return True  # on a CPU partition gpn counts processes: the CPU check bounds them
    want_nodes = math.ceil(nodes * gpn / partition.gpus_per_node)
    c.add(
        "resources.gpus_per_node",
        gpn,
        f"but {cluster.name} nodes have {partition.gpus_per_node} GPUs",
        f"use resources.nodes={want_nodes} resources.gpus_per_node={partition.gpus_per_node}",
    )
    return False


def check_cpus(
    c: Collector,
    cluster: ClusterProfile,
    partition: Partition,
    *,
    raw_cpus: object,
    gpus_per_task: int,
    ntasks_per_node: int,
    gpus_fit: bool,
) -> int | None:
    """CPUs per task: the node's share of the task's GPUs for auto, else checked against it."""
    cname = cluster.name
    share = partition.cpus_per_gpu * gpus_per_task if partition.cpus_per_gpu else None
    if raw_cpus in (None, "auto"):
        if partition.cpu_only and partition.cpus_per_node:
            return max(1, partition.cpus_per_node // ntasks_per_node)  # the node, shared
        return share or 1  # Slurm's own default is one CPU per task
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
    node_cpus = partition.cpus_per_node
    if (
        cpus is not None
        and gpus_fit  # otherwise the GPU problem already says what to change
        and node_cpus is not None
        and cpus * ntasks_per_node > node_cpus
        and (share is None or cpus <= share)
    ):
        c.add(
            "resources.cpus_per_task",
            cpus,
            f"x {ntasks_per_node} tasks per node is above the {node_cpus} CPUs of a {cname} node",
            f"use resources.cpus_per_task={node_cpus // ntasks_per_node}"
            if node_cpus >= ntasks_per_node
            else f"use at most {node_cpus} tasks per node, e.g. "
            f"resources.gpus_per_node={node_cpus}",
        )
    return cpus


def check_mem(c: Collector, cluster: ClusterProfile, partition: Partition, mem: str | None) -> None:
    mem_mb = mem_megabytes(mem) if mem is not None else None
    if mem_mb is not None and partition.mem_per_node_mb and mem_mb > partition.mem_per_node_mb:
        c.add(
            "resources.mem",
            mem,
            f"is above the {partition.mem_per_node_mb}M of memory of a {cluster.name} node",
            f"use resources.mem={partition.mem_per_node_mb}M or less, or resources.mem=null",
        )


def check_account(c: Collector, cluster: ClusterProfile) -> str | None:
    account, suffix, cname = cluster.account, cluster.account_suffix, cluster.name
    if cluster.account_required and not account:
        c.add(
            "cluster.account",
            account,
            f"is not set, but {cname} charges every job to a project",
            f"use cluster.account=<project>{suffix or ''} (`idracct` on Jean Zay lists your "
            "projects)",
        )
    elif account and (CONTROL.search(account) or " " in account):
        c.add("cluster.account", account, "contains blanks or control characters")
    elif account and suffix and not account.endswith(suffix):
        c.add(
            "cluster.account",
            account,
            f"does not end with {suffix}: {cname} hours are charged to <project>{suffix}",
            f"use cluster.account={account.split('@')[0]}{suffix}",
        )
    return account


def check_time(
    c: Collector,
    cluster: ClusterProfile,
    partition: Partition,
    *,
    requested_qos: object,
    minutes: int,
    total_gpus: int,
    preemption: tuple[str, int],
) -> str | None:
    """The time against the partition, the QoS and the warning's lead; returns the QoS."""
    qos = None
    if partition.max_minutes is not None and minutes > partition.max_minutes:
        limit = format_time(partition.max_minutes)
        c.add(
            "resources.time",
            format_time(minutes),
            f"is above the {limit} limit of {cluster.name} partition {partition.name}",
            f"use resources.time={limit} or less, and resume from a checkpoint in a follow-up job",
        )
    else:
        qos = pick_qos(c, cluster, requested_qos, minutes, total_gpus, partition.name)
    # A job too short for the lead (and Slurm's early sending) gets the warning while it
    # starts: it saves before its first step and requeues, again and again.
    signal, lead = preemption
    if cluster.is_slurm and minutes * 60 - lead - SIGNAL_EARLY_S < MIN_WORK_BEFORE_WARNING_S:
        enough = -(-(lead + SIGNAL_EARLY_S + MIN_WORK_BEFORE_WARNING_S) // 60)  # ceiling
        c.add(
            "resources.time",
            format_time(minutes),
            f"leaves no time to train before the time-limit warning: Slurm sends "
            f"preemption.signal={signal} preemption.lead_seconds={lead} s before the end, "
            f"and up to {SIGNAL_EARLY_S} s earlier than that",
            f"use resources.time={format_time(enough)} or more, or a smaller "
            "preemption.lead_seconds",
        )
    return qos


def _no_qos_hint(usable: list[Qos], minutes: int, total_gpus: int) -> str:
    """Values that would pass: the longest time a QoS allows this many GPUs, and the most
    GPUs a QoS allows this long (each only where one exists)."""
    options = []
    by_time = [q for q in usable if _qos_fits(q, 0, total_gpus)]
    if by_time:
        q = by_time[-1]
        options.append(f"resources.time={format_time(q.max_minutes)} or less ({q.name})")
    long_enough = [q for q in usable if q.max_minutes >= minutes]
    capped = [q for q in long_enough if q.max_gpus_per_job]
    if long_enough and len(capped) == len(long_enough):
        q = max(capped, key=lambda x: x.max_gpus_per_job or 0)
        options.append(f"at most {q.max_gpus_per_job} GPUs in all ({q.name})")
    return ("use " + ", or ".join(options)) if options else "ask for less time or fewer GPUs"


def pick_qos(
    c: Collector,
    cluster: ClusterProfile,
    requested: object,
    minutes: int,
    total_gpus: int,
    partition: str,
) -> str | None:
    """Check a named QoS, or pick the shortest one that fits for qos=auto, among those
    the partition allows (a GPU job is never given a CPU partition's QoS)."""
    if not cluster.qos:  # the profile does not know the site's QoS: pass the name through
        if requested in (None, "auto"):
            return None
        if not isinstance(requested, str) or CONTROL.search(requested) or " " in requested:
            c.add("resources.qos", requested, "is not a QoS name")
            return None
        return requested
    usable = [q for q in cluster.qos_by_time() if q.usable_on(partition)]
    fitting = [q for q in usable if _qos_fits(q, minutes, total_gpus)]
    if requested in (None, "auto"):
        if fitting:
            return fitting[0].name
        c.add(
            "resources.time",
            format_time(minutes),
            f"with {total_gpus} GPUs fits no QoS of {cluster.name} partition {partition} "
            f"({_qos_table(usable)})",
            _no_qos_hint(usable, minutes, total_gpus),
        )
        return None
    qos = cluster.qos.get(str(requested))
    if qos is None or not qos.usable_on(partition):
        where = f"{cluster.name}" if qos is None else f"partition {partition} (AllowQos)"
        c.add(
            "resources.qos",
            requested,
            f"is not a QoS of {where} ({_qos_table(usable)})",
            "use resources.qos=auto to pick the shortest QoS that fits",
        )
        return None
    if minutes > qos.max_minutes:
        c.add(
            "resources.time",
            format_time(minutes),
            f"is above the {format_time(qos.max_minutes)} limit of QoS {qos.name}",
            f"use resources.qos={fitting[0].name}"
            if fitting
            else f"use resources.time={format_time(qos.max_minutes)} or less",
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


def _qos_table(usable: list[Qos]) -> str:
    parts = []
    for q in usable:
        limit = f" max {q.max_gpus_per_job} GPUs" if q.max_gpus_per_job else ""
        parts.append(f"{q.name} <= {format_time(q.max_minutes)}{limit}")
    return "; ".join(parts)
