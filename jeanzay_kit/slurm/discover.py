"""Write a cluster profile from what a live Slurm cluster says about itself. Pure.

`jzk cluster discover` runs the commands (slurm/commands.py) and hands their text here:

    scontrol show config           ClusterName, MaxArraySize, PreemptType, AccountingStorageEnforce
    scontrol show partition -o     partitions: nodes, MaxTime, Default, PriorityTier, PreemptMode
    scontrol show node -o          per node: CPUTot, ThreadsPerCore, RealMemory, Gres, features
    sacctmgr -n -P show qos ...    QoS: MaxWall and the GPUs a job may hold (MaxTRESPerJob)
    sacctmgr -n -P show assoc ...  the user's accounts and the QoS each may use

The result is YAML text in the schema of conf/cluster/*.yaml, with a comment on every
value naming the command it came from, so a user can check it and edit it.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from jeanzay_kit.config.schema import MAX_ARRAY_SIZE
from jeanzay_kit.slurm_syntax.hostlist import compress_hostlist, expand_hostlist
from jeanzay_kit.slurm_syntax.timefmt import parse_time

# "Key=value Key2=value with spaces Key3=..." (scontrol -o): a value runs to the next
# " Key=" (node lines carry "OS=Linux 6.1.0 #1 SMP ...").
_KEY = r"[A-Za-z][A-Za-z0-9_/:.]*"
_FIELD = re.compile(rf"(?:^|\s)({_KEY})=(.*?)(?=\s+{_KEY}=|\s*$)")
_NO_VALUE = {"", "(null)", "N/A", "NONE", "none"}
# GPU models without fast bf16: the profile then says bf16: false (precision auto -> fp16).
_NO_BF16 = ("v100", "p100", "t4", "k80", "p40", "rtx")

SCONTROL_CONFIG = "scontrol show config"
SCONTROL_PARTITIONS = "scontrol show partition -o"
SCONTROL_NODES = "scontrol show node -o"
SACCTMGR_QOS = "sacctmgr -n -P show qos format=Name,MaxWall,MaxTRESPerJob"
SACCTMGR_ASSOC = "sacctmgr -n -P show assoc user=<you> format=Account,Partition,QOS"


def parse_records(text: str) -> list[dict[str, str]]:
    """One dict per line of `scontrol show <kind> -o`."""
    return [dict(_FIELD.findall(line)) for line in text.splitlines() if "=" in line]


def parse_config(text: str) -> dict[str, str]:
    """`scontrol show config`: "Name  = value" lines."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and " " not in key.strip():
            out[key.strip()] = value.strip()
    return out


def gres_gpus(gres: str) -> tuple[int, str | None]:
    """GPUs per node and their type from a Gres string: "gpu:4", "gpu:a100:8(S:0-1)",
    "gpu:h100:4,mps:400" -> (4, None), (8, "a100"), (4, "h100")."""
    total, kind = 0, None
    for item in re.split(r",(?![^(]*\))", gres or ""):
        parts = item.split("(")[0].split(":")
        if parts[0] != "gpu" or len(parts) < 2:
            continue
        count = parts[-1]
        if count.isdigit():
            total += int(count)
            if len(parts) == 3:
                kind = parts[1]
    return total, kind


@dataclass
class _Partition:
    name: str
    nodes: list[str]
    max_time: str | None
    default: bool
    tier: int
    preempt_mode: str
    gpus: int = 0
    gpu_kinds: set[str] = field(default_factory=set)
    cpus: int | None = None
    mem_mb: int | None = None
    features: list[str] = field(default_factory=list)
    uneven: list[str] = field(default_factory=list)  # what differs between its nodes
    threads_per_core: int = 1
    allow_qos: tuple[str, ...] = ()  # AllowQos; empty: ALL


@dataclass(frozen=True)
class Accounting:
    """sacctmgr's answers, or why there are none."""

    qos_text: str | None
    assoc_text: str | None
    missing: str | None = None  # e.g. sacctmgr's error when Slurm keeps no accounting


@dataclass(frozen=True)
class Discovered:
    name: str
    yaml: str
    notes: list[str]


def _partitions(part_text: str, node_text: str) -> list[_Partition]:
    nodes = {n.get("NodeName", ""): n for n in parse_records(node_text)}
    out = []
    for rec in parse_records(part_text):
        names = expand_hostlist(rec["Nodes"]) if rec.get("Nodes") not in _NO_VALUE else []
        max_time = rec.get("MaxTime")
        part = _Partition(
            name=rec["PartitionName"],
            nodes=names,
            max_time=None if max_time in (None, "UNLIMITED", *_NO_VALUE) else max_time,
            default=rec.get("Default") == "YES",
            tier=int(rec.get("PriorityTier", "1") or 1),
            preempt_mode=rec.get("PreemptMode", "OFF"),
            allow_qos=_allowed_qos(rec.get("AllowQos", "ALL")),
        )
        gpus: list[int] = []
        cpus: list[int] = []
        mems: list[int] = []
        threads: list[int] = []
        feats: set[str] = set()
        for node in (nodes[n] for n in names if n in nodes):
            count, kind = gres_gpus(node.get("Gres", ""))
            gpus.append(count)
            if kind:
                part.gpu_kinds.add(kind)
            tpc = int(node.get("ThreadsPerCore", "1") or 1)
            threads.append(tpc)
            cpus.append(int(node.get("CPUTot", "0") or 0) // tpc)
            if node.get("RealMemory", "").isdigit():
                mems.append(int(node["RealMemory"]))
            available = node.get("AvailableFeatures", "")
            if available not in _NO_VALUE:
                feats.update(f for f in available.split(",") if f)
        # A partition of mixed nodes: the smallest node is what every job can count on.
        for label, values in (("GPUs", gpus), ("CPUs", cpus), ("memory", mems)):
            if len(set(values)) > 1:
                part.uneven.append(f"{label} {min(values)}-{max(values)}")
        part.gpus = min(gpus) if gpus else 0
        part.cpus = min(cpus) if cpus else None
        part.mem_mb = min(mems) if mems else None
        part.threads_per_core = max(threads) if threads else 1
        part.features = sorted(feats)
        out.append(part)
    return out


def _allowed_qos(value: str) -> tuple[str, ...]:
    """AllowQos=ALL (or unset): any QoS; else the listed ones."""
    if value in ("ALL", *_NO_VALUE):
        return ()
    return tuple(q for q in value.split(",") if q)


def _qos_partitions(name: str, parts: list[_Partition]) -> list[str] | None:
    """The partitions that allow QoS `name`; None when every one does."""
    allowing = [p.name for p in parts if not p.allow_qos or name in p.allow_qos]
    return None if len(allowing) == len(parts) else allowing


def _qos_limits(qos_text: str) -> dict[str, tuple[str | None, int | None]]:
    """name -> (MaxWall, GPUs per job) from `sacctmgr -n -P show qos format=Name,MaxWall,
    MaxTRESPerJob`."""
    out = {}
    for line in qos_text.splitlines():
        cols = line.split("|")
        if len(cols) < 3 or not cols[0]:
            continue
        gpus = re.search(r"gres/gpu(?::[^=,]+)?=(\d+)", cols[2])
        out[cols[0]] = (cols[1] or None, int(gpus.group(1)) if gpus else None)
    return out


def _assoc(assoc_text: str) -> tuple[list[str], set[str]]:
    """The user's accounts and every QoS their associations allow."""
    accounts: list[str] = []
    qos: set[str] = set()
    for line in assoc_text.splitlines():
        cols = line.split("|")
        if len(cols) < 3 or not cols[0]:
            continue
        if cols[0] not in accounts:
            accounts.append(cols[0])
        qos.update(q for q in cols[2].split(",") if q)
    return accounts, qos


def _q(value: object) -> str:
    """A YAML scalar: strings quoted (times such as 01:00:00 would read as numbers)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def profile_name(
    given: str | None, cluster_name: str | None, shipped: Collection[str]
) -> tuple[str, str | None]:
    """The profile's name (and a note when it is not the ClusterName). A profile of the
    user's is found before the package's (conf/cluster/<name>.yaml): one named like a
    shipped profile would hide it (a cluster named `local` hid cluster=local, the default
    of a plain `jzk train`). --name of a shipped profile is refused; a ClusterName that is
    one gets a name of its own, said in a note."""
    if given:
        if given in shipped:
            raise ValueError(
                f"--name {given} is a shipped profile (jzk clusters): a profile of yours "
                f"named so would hide it. Use another name, e.g. --name {given}_slurm"
            )
        return given, None
    name = cluster_name or "my_cluster"
    if name not in shipped:
        return name, None
    new, n = f"{name}_slurm", 2
    while new in shipped:
        new, n = f"{name}_slurm{n}", n + 1
    return new, (
        f"ClusterName {name} is the name of a shipped profile (cluster={name}): this one "
        f"is named {new} so as not to hide it; --name chooses another"
    )


def discover_profile(
    config_text: str,
    partition_text: str,
    node_text: str,
    accounting: Accounting,
    name: str | None = None,
    shipped: Collection[str] = (),
) -> Discovered:
    """The profile YAML of the cluster these texts describe, and notes for the user.
    shipped: the package's profile names, which the profile's name never takes."""
    conf = parse_config(config_text)
    name, renamed = profile_name(name, conf.get("ClusterName"), shipped)
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise ValueError(f"--name {name!r}: use letters, digits, '_', '-' or '.'")
    notes: list[str] = [renamed] if renamed else []
    parts = [p for p in _partitions(partition_text, node_text) if p.nodes]
    if not parts:
        raise ValueError(f"{SCONTROL_PARTITIONS} lists no partition with nodes")
    cpu_parts = [p.name for p in parts if p.gpus == 0]
    if cpu_parts:
        notes.append(
            f"partitions without GPUs: {', '.join(cpu_parts)} (a job there runs CPU "
            "processes: resources.gpus_per_node counts them, no GPU is asked)"
        )
    qos_lines, accounts, default_qos = _qos_section(accounting, parts, notes)
    lines = _profile_head(name, conf, parts, accounts)
    lines.append("partitions:")
    preempt_type, top_tier = conf.get("PreemptType", ""), max(p.tier for p in parts)
    for p in parts:
        lines += _partition_lines(p, preempt_type, top_tier)
    if qos_lines:
        lines.append("qos:")
        lines += qos_lines
    else:
        why = accounting.missing and "no accounting" or "no QoS found for you"
        lines.append(f"qos: {{}}  # {why}: QoS names are passed to Slurm unchecked")
    lines.append(f"default_qos: {default_qos or 'null'}")
    return Discovered(name, "\n".join(lines) + "\n", notes)


def _qos_section(
    accounting: Accounting, parts: list[_Partition], notes: list[str]
) -> tuple[list[str], list[str], str | None]:
    """The profile's `qos:` entries, the user's accounts and the default QoS, from
    sacctmgr (notes: what could not be known)."""
    if accounting.missing:
        notes.append(
            f"no Slurm accounting ({accounting.missing}): QoS and accounts are not known; "
            "QoS names are passed to Slurm unchecked"
        )
        return [], [], None
    qos_lines: list[str] = []
    limits = _qos_limits(accounting.qos_text or "")
    accounts, allowed = _assoc(accounting.assoc_text or "")
    longest = max((p.max_time for p in parts if p.max_time), default=None, key=_minutes)
    for qname in sorted(limits):
        if allowed and qname not in allowed:
            continue
        wall, gpus = limits[qname]
        src = f"# {SACCTMGR_QOS}"
        if wall is None:
            if longest is None:
                notes.append(f"QoS {qname} has no MaxWall and no partition a MaxTime: left out")
                continue
            wall, src = longest, src + " (no MaxWall: the longest partition MaxTime)"
        limit = f", max_gpus_per_job: {gpus}" if gpus is not None else ""
        where = _qos_partitions(qname, parts)
        if where is not None:
            limit += f", partitions: [{', '.join(where)}]"
            src += f"; {SCONTROL_PARTITIONS}: AllowQos"
        qos_lines.append(f"  {qname}: {{max_time: {_q(wall)}{limit}}}  {src}")
    default_qos = "normal" if "normal" in limits and (not allowed or "normal" in allowed) else None
    return qos_lines, accounts, default_qos


def _profile_head(
    name: str, conf: dict[str, str], parts: list[_Partition], accounts: list[str]
) -> list[str]:
    """The profile's keys above `partitions:`, each naming the command it came from."""
    gpu_parts = [p for p in parts if p.gpus > 0]
    # The site's default when it has GPUs, else the first GPU partition: a training job
    # without resources.partition should get GPUs (a CPU partition is asked by name).
    default = next((p for p in gpu_parts or parts if p.default), (gpu_parts or parts)[0])
    threads = max(p.threads_per_core for p in parts)
    kinds = {k.lower() for p in gpu_parts for k in p.gpu_kinds}
    bf16 = not any(k.startswith(_NO_BF16) for k in kinds)
    enforce = conf.get("AccountingStorageEnforce", "none")
    return [
        f"# Cluster profile written by `jzk cluster discover` from the live cluster {name}.",
        "# Every value names the command it came from: check them, edit what the site's",
        "# documentation says better (modules, env, the account to charge), keep the file.",
        "# `python train.py -m ...` on this cluster submits job arrays (docs/slurm.md).",
        "defaults:",
        "  - base_cluster  # the typed schema: jeanzay_kit/config/schema.py",
        "  - override /hydra/launcher@_global_.hydra.launcher: jeanzay",
        "  - override /hydra/sweeper@_global_.hydra.sweeper: jeanzay",
        "  - _self_",
        f"name: {name}",
        f"description: {_q(f'{name}, discovered: ' + ', '.join(p.name for p in parts))}",
        "scheduler: slurm",
        "device: cuda            # cpu where the GPUs are stand-ins (training then uses gloo)"
        if gpu_parts
        else "device: cpu             # no partition has GPUs (Gres)",
        f"account: {_q(accounts[0]) if len(accounts) == 1 else 'null'}"
        + (
            f"  # {SACCTMGR_ASSOC}: {', '.join(accounts)}"
            if accounts
            else "  # no association found: your site may not charge accounts"
        ),
        f"account_required: {_q('associations' in enforce)}"
        f"  # {SCONTROL_CONFIG}: AccountingStorageEnforce={enforce}",
        "account_suffix: null",
        f"bf16: {_q(bf16)}  # {SCONTROL_NODES}: Gres GPU types "
        + (", ".join(sorted(kinds)) if kinds else "not given (set false for V100/T4 and older)"),
        f"hint: {'nomultithread' if threads > 1 else 'null'}"
        f"  # {SCONTROL_NODES}: ThreadsPerCore={threads}",
        f"gpu_request: gres  # {SCONTROL_NODES}: GPUs are generic resources (Gres=gpu:N)",
        "modules: []             # the site's modules, e.g. [cuda/12.4, pytorch-gpu/py3/2.5.0]",
        "module_purge: false",
        "pytorch_module: null     # a site module that brings torch, loaded after modules",
        "env: {}                 # e.g. {NCCL_SOCKET_IFNAME: ib0}",
        f"max_array_size: {int(conf.get('MaxArraySize') or MAX_ARRAY_SIZE)}"
        f"  # {SCONTROL_CONFIG}: MaxArraySize",
        f"default_partition: {default.name}  # {SCONTROL_PARTITIONS}: "
        + (
            "Default=YES"
            if default.default
            else "the first GPU partition (none is Default=YES)"
            if gpu_parts
            else "the first partition (none is Default=YES)"
        ),
    ]


def _partition_lines(p: _Partition, preempt_type: str, top_tier: int) -> list[str]:
    """One partition of the profile, each value naming where it came from."""
    src = f"# {SCONTROL_NODES}"
    uneven = f" (mixed nodes: {'; '.join(p.uneven)}; the smallest)" if p.uneven else ""
    lines = [
        f"  {p.name}:  # {SCONTROL_PARTITIONS}: Nodes={_hosts(p.nodes)}",
        f"    gpus_per_node: {p.gpus}  {src}: Gres{uneven}"
        + (" has no gpu: CPU processes run here" if p.gpus == 0 else ""),
    ]
    if p.cpus is not None:
        lines.append(
            f"    cpus_per_node: {p.cpus}  {src}: CPUTot / ThreadsPerCore={p.threads_per_core}"
        )
    if p.mem_mb is not None:
        lines.append(f'    mem_per_node: "{p.mem_mb}M"  {src}: RealMemory')
    lines.append(
        f"    max_time: {_q(p.max_time)}  # {SCONTROL_PARTITIONS}: MaxTime"
        + ("=UNLIMITED" if p.max_time is None else "")
    )
    lines.append("    select: partition")
    if p.features:
        lines.append(f"    constraints: [{', '.join(p.features)}]  {src}: AvailableFeatures")
    preemptible = "partition_prio" in preempt_type and p.tier < top_tier and p.preempt_mode != "OFF"
    lines.append(
        f"    preemptible: {_q(preemptible)}  # {SCONTROL_PARTITIONS}: PriorityTier={p.tier}"
        f" (highest {top_tier}), PreemptMode={p.preempt_mode}; {SCONTROL_CONFIG}: "
        f"PreemptType={preempt_type or 'none'}"
    )
    return lines


def _hosts(nodes: Sequence[str]) -> str:
    return compress_hostlist(list(nodes)) if nodes else "(none)"


def _minutes(value: str | None) -> int:
    return parse_time(value) if value else 0
