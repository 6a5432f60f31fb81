"""Cluster profiles as values: partitions, constraints, QoS limits, accounts, modules.

The facts live in conf/cluster/*.yaml (data, with their sources in docs/clusters.md);
this module only gives them a type. Pure: built from plain mappings, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from jeanzay_kit.config.schema import MAX_ARRAY_SIZE
from jeanzay_kit.config.storage_rules import StorageTier, storage_tiers
from jeanzay_kit.errors import Problem, SpecError, TimeFormatError
from jeanzay_kit.slurm_syntax.timefmt import parse_time


@dataclass(frozen=True)
class Partition:
    """One kind of node a job can land on, and how sbatch asks for it."""

    name: str
    gpus_per_node: int | None  # None: not limited by the profile (cluster=local)
    cpus_per_node: int | None
    max_minutes: int | None  # None: no limit known to the profile
    select: str = "partition"  # "partition": render --partition; "constraint": -C only
    constraints: tuple[str, ...] = ()  # values allowed for resources.constraint
    default_constraint: str | None = None
    preemptible: bool = False
    mem_per_node_mb: int | None = None  # what a job may ask with --mem (RealMemory)
    # Each GPU's memory in MB, per constraint ("" : every GPU of the partition); empty:
    # not known to the profile, so plans are not checked against it (launch/fit_check.py).
    gpu_memory_mb: Mapping[str, int] = field(default_factory=dict)

    def gpu_memory_for(self, constraint: str | None) -> tuple[int, str] | None:
        """The memory of the GPU a job with this constraint may land on, and which GPU
        that is: with no constraint naming one, the smallest (the job may get it)."""
        if not self.gpu_memory_mb:
            return None
        if constraint is not None and constraint in self.gpu_memory_mb:
            return self.gpu_memory_mb[constraint], constraint
        if "" in self.gpu_memory_mb:
            return self.gpu_memory_mb[""], ""
        name = min(self.gpu_memory_mb, key=lambda k: self.gpu_memory_mb[k])
        return self.gpu_memory_mb[name], name

    @property
    def cpu_only(self) -> bool:
        """Nodes without GPUs (prepost, cpu_p1): resources.gpus_per_node then counts the
        CPU processes per node, as on cluster=local without a GPU, and no GPU is asked."""
        return self.gpus_per_node == 0

    @property
    def cpus_per_gpu(self) -> int | None:
        if self.cpus_per_node is None or not self.gpus_per_node:
            return None
        return self.cpus_per_node // self.gpus_per_node


@dataclass(frozen=True)
class Qos:
    name: str
    max_minutes: int
    max_gpus_per_job: int | None = None
    # The partitions whose jobs may use it (Slurm's AllowQos); empty: any partition.
    partitions: tuple[str, ...] = ()

    def usable_on(self, partition: str) -> bool:
        return not self.partitions or partition in self.partitions


@dataclass(frozen=True)
class ClusterProfile:
    name: str
    scheduler: str  # "slurm" | "local"
    device: str  # "cuda" | "cpu" | "auto" (auto: decided on the machine at run time)
    partitions: Mapping[str, Partition]
    default_partition: str
    qos: Mapping[str, Qos] = field(default_factory=dict)  # empty: the site's QoS are not checked
    default_qos: str | None = None  # what Slurm applies when no --qos is given
    account: str | None = None
    account_required: bool = False
    account_suffix: str | None = None  # e.g. "@h100": Jean Zay accounts are <project>@<arch>
    bf16: bool = True
    hint: str | None = None  # e.g. "nomultithread"
    gpu_request: str = "gres"  # "gres" -> --gres=gpu:N, "gpus" -> --gpus-per-node=N
    modules: tuple[str, ...] = ()
    module_purge: bool = False
    # The site's PyTorch module, loaded after `modules` (Jean Zay: after arch/h100),
    # e.g. "pytorch-gpu/py3/2.9.0"; None: the job's own environment brings torch.
    pytorch_module: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    # Containers (job.container): runtime, its module, folders every container sees, and
    # where images must be (Jean Zay: $SINGULARITY_ALLOWED_DIR). $VARS as the node has them.
    container_runtime: str = "apptainer"
    container_module: str | None = None
    container_binds: tuple[str, ...] = ()
    container_allowed_dir: str | None = None
    max_array_size: int = MAX_ARRAY_SIZE  # Slurm's MaxArraySize (schema's default)
    description: str = ""
    # Laptop mode (cluster.remote): the toolkit's folder on the login node, the Python
    # its venv is made from, and shell lines run there before every command.
    remote_workdir: str = "~/jzk"
    remote_python: str = "python3"
    remote_setup: tuple[str, ...] = ()
    # The account's allocation on this pool (cluster.allocation): GPU hours granted (None:
    # not declared), since when, the site's blocking ratio, and whether to go over it.
    allocation_hours: float | None = None
    allocation_since: str | None = None
    allocation_blocked_at: float = 1.0
    allocation_go_over: bool = False
    # Compute nodes without internet (docs/offline.md): false makes `jzk submit` find every
    # network access of the run before the queue and the job set the libraries' offline
    # switches; the partition `jzk prefetch` downloads on (None: the login node); the
    # libraries' cache folder (None: their defaults under ~/.cache; $VARS as the node has them).
    compute_internet: bool = True
    prefetch_partition: str | None = None
    cache_dir: str | None = None
    # The places to write, with their quotas and purge age (config/storage_rules.py).
    storage: tuple[StorageTier, ...] = ()

    @property
    def loaded_modules(self) -> tuple[str, ...]:
        """What a job loads, in order: the profile's modules, then the PyTorch module
        (after arch/...: it selects the build)."""
        return (*self.modules, *([self.pytorch_module] if self.pytorch_module else []))

    @property
    def is_slurm(self) -> bool:
        return self.scheduler == "slurm"

    def qos_by_time(self) -> list[Qos]:
        return sorted(self.qos.values(), key=lambda q: q.max_minutes)


def _minutes(key: str, value: object) -> int | None:
    if value is None:
        return None
    try:
        return parse_time(value)
    except TimeFormatError as err:
        raise SpecError(Problem(key, value, f"is not a time ({err})")) from err


_MEM_UNITS = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}


def mem_megabytes(value: object) -> int | None:
    """A Slurm memory size ("64G", "512000M", "1000": megabytes) in MB; None if invalid."""
    text = str(value).strip().upper()
    unit = text[-1] if text and text[-1] in _MEM_UNITS else "M"
    number = text[:-1] if text and text[-1] in _MEM_UNITS else text
    if not number.isdigit():
        return None
    return int(int(number) * _MEM_UNITS[unit])


def _megabytes(key: str, value: object) -> int | None:
    if value is None:
        return None
    mb = mem_megabytes(value)
    if mb is None:
        raise SpecError(Problem(key, value, "is not a memory size", "use e.g. 512G or 480000M"))
    return mb


# The keys a partition and a QoS may have in a profile (optional ones vary per site, so
# the schema types them as plain mappings and they are checked here).
PARTITION_KEYS = (
    "gpus_per_node",
    "cpus_per_node",
    "max_time",
    "select",
    "constraints",
    "default_constraint",
    "preemptible",
    "mem_per_node",
    "gpu_memory",
)
QOS_KEYS = ("max_time", "max_gpus_per_job", "partitions")


def _check_keys(prefix: str, node: object, allowed: tuple[str, ...]) -> Mapping[str, object]:
    if not isinstance(node, Mapping):
        raise SpecError(Problem(prefix, node, "must be a mapping of keys to values"))
    unknown = [k for k in node if k not in allowed]
    if unknown:
        raise SpecError(
            [
                Problem(
                    f"{prefix}.{k}",
                    node[k],
                    "is not a known key",
                    f"use one of {', '.join(allowed)} (docs/sites.md)",
                )
                for k in unknown
            ]
        )
    return node


@dataclass(frozen=True)
class _Keys:
    """One mapping of a profile read key by key. The schema leaves partitions, QoS and
    most profile keys untyped (they vary per site): a value of the wrong type is refused
    here, naming its key, before it reaches a rule that counts on its type."""

    prefix: str
    data: Mapping[str, object]

    def _wrong(self, key: str, value: object, what: str) -> SpecError:
        return SpecError(Problem(f"{self.prefix}.{key}", value, f"must be {what}"))

    def count(self, key: str, default: int | None = None) -> int | None:
        value = self.data.get(key, default)
        if value is None or (isinstance(value, int) and not isinstance(value, bool)):
            return value
        raise self._wrong(key, value, "a whole number")

    def text(self, key: str, default: str | None = None) -> str | None:
        """A string; a number is taken as written (an account such as 12345); null, an
        empty string and absence are `default`."""
        value = self.data.get(key)
        if value is None or value == "":
            return default
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise self._wrong(key, value, "a string")
        return str(value)

    def texts(self, key: str) -> tuple[str, ...]:
        value = self.data.get(key)
        if value is None:
            return ()
        if not isinstance(value, list | tuple):
            raise self._wrong(key, value, "a list")
        return tuple(str(v) for v in value)

    def flag(self, key: str, default: bool) -> bool:
        value = self.data.get(key, default)
        if not isinstance(value, bool):
            raise self._wrong(key, value, "true or false")
        return value


def _partition(name: str, node: object) -> Partition:
    key = f"cluster.partitions.{name}"
    p = _Keys(key, _check_keys(key, node, PARTITION_KEYS))
    return Partition(
        name=name,
        gpus_per_node=p.count("gpus_per_node"),
        cpus_per_node=p.count("cpus_per_node"),
        max_minutes=_minutes(f"{key}.max_time", p.data.get("max_time")),
        select=p.text("select") or "partition",
        constraints=p.texts("constraints"),
        default_constraint=p.text("default_constraint"),
        preemptible=p.flag("preemptible", False),
        mem_per_node_mb=_megabytes(f"{key}.mem_per_node", p.data.get("mem_per_node")),
        gpu_memory_mb=_gpu_memory(f"{key}.gpu_memory", p.data.get("gpu_memory")),
    )


def _gpu_memory(key: str, value: object) -> Mapping[str, int]:
    """A partition's GPU memory: one size ("80G"), or a size per constraint
    ({v100-16g: 16G, v100-32g: 32G}) where nodes differ."""
    if value is None:
        return {}
    sizes = value if isinstance(value, Mapping) else {"": value}
    out = {}
    for name, size in sizes.items():
        mb = _megabytes(key if name == "" else f"{key}.{name}", size)
        if not mb:
            raise SpecError(Problem(key, value, "is not a memory size", "use e.g. 80G"))
        out[str(name)] = mb
    return out


def _qos(name: str, node: object) -> Qos:
    key = f"cluster.qos.{name}"
    q = _Keys(key, _check_keys(key, node, QOS_KEYS))
    minutes = _minutes(f"{key}.max_time", q.data.get("max_time"))
    if minutes is None:
        raise SpecError(Problem(f"{key}.max_time", None, "is required"))
    return Qos(name, minutes, q.count("max_gpus_per_job"), q.texts("partitions"))


def _named(prefix: str, value: object) -> Mapping[str, object]:
    """cluster.partitions / cluster.qos: a mapping of names (null: none)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SpecError(Problem(prefix, value, "must be a mapping of names to settings"))
    return value


def _partitions(name: str, node: object) -> dict[str, Partition]:
    partitions = {
        str(pname): _partition(str(pname), p)
        for pname, p in _named("cluster.partitions", node).items()
    }
    if not partitions:
        raise SpecError(
            Problem(
                "cluster.partitions",
                None,
                f"is empty in profile {name}",
                "describe at least one partition in conf/cluster/<profile>.yaml",
            )
        )
    return partitions


def profile_from_dict(data: Mapping[str, object]) -> ClusterProfile:
    """Build a profile from the `cluster` node of the composed config."""
    d = _Keys("cluster", data)
    name = d.text("name") or "?"
    partitions = _partitions(name, data.get("partitions"))
    qos = {
        str(qname): _qos(str(qname), q)
        for qname, q in _named("cluster.qos", data.get("qos")).items()
    }
    default_partition = d.text("default_partition") or next(iter(partitions))
    if default_partition not in partitions:
        raise SpecError(
            Problem(
                "cluster.default_partition",
                default_partition,
                f"is not one of the partitions of {name} ({', '.join(partitions)})",
            )
        )
    remote = _remote(data.get("remote"))
    allocation = _allocation(data.get("allocation"))
    return ClusterProfile(
        name=name,
        scheduler=d.text("scheduler") or "slurm",
        device=d.text("device") or "cuda",
        partitions=partitions,
        default_partition=default_partition,
        qos=qos,
        default_qos=d.text("default_qos"),
        account=d.text("account"),
        account_required=d.flag("account_required", False),
        account_suffix=d.text("account_suffix"),
        bf16=d.flag("bf16", True),
        hint=d.text("hint"),
        gpu_request=d.text("gpu_request") or "gres",
        modules=d.texts("modules"),
        module_purge=d.flag("module_purge", False),
        pytorch_module=d.text("pytorch_module"),
        env={str(k): str(v) for k, v in _named("cluster.env", data.get("env")).items()},
        container_runtime=d.text("container_runtime") or "apptainer",
        container_module=d.text("container_module"),
        container_binds=d.texts("container_binds"),
        container_allowed_dir=d.text("container_allowed_dir"),
        max_array_size=d.count("max_array_size", MAX_ARRAY_SIZE) or MAX_ARRAY_SIZE,
        description=d.text("description") or "",
        remote_workdir=remote[0],
        remote_python=remote[1],
        remote_setup=remote[2],
        allocation_hours=allocation[0],
        allocation_since=allocation[1],
        allocation_blocked_at=allocation[2],
        allocation_go_over=allocation[3],
        compute_internet=d.flag("compute_internet", True),
        prefetch_partition=d.text("prefetch_partition"),
        cache_dir=d.text("cache_dir"),
        storage=storage_tiers(data.get("storage")),
    )


ALLOCATION_KEYS = ("hours", "since", "blocked_at", "go_over")


def _allocation(node: object) -> tuple[float | None, str | None, float, bool]:
    """cluster.allocation's keys, checked (docs/queue.md): hours, since, blocked_at, go_over."""
    data = _check_keys("cluster.allocation", node or {}, ALLOCATION_KEYS)
    d = _Keys("cluster.allocation", data)
    numbers: list[float | None] = []
    for key, least in (("hours", 0.0), ("blocked_at", 1.0)):
        value = data.get(key, None if key == "hours" else 1.0)
        if value is None:
            numbers.append(None)
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or value < least:
            raise SpecError(
                Problem(f"cluster.allocation.{key}", value, f"must be a number >= {least:g}")
            )
        numbers.append(float(value))
    since = d.text("since")
    if since is not None and not re.match(r"^\d{4}-\d\d-\d\d$", since):
        raise SpecError(
            Problem(
                "cluster.allocation.since", since, "must be a day, YYYY-MM-DD", "e.g. 2026-05-01"
            )
        )
    return numbers[0], since, numbers[1] or 1.0, d.flag("go_over", False)


REMOTE_KEYS = ("workdir", "python", "setup")
# A work folder written into the login node's command line: a path, a leading ~ and
# $VARIABLES, nothing the shell would split or run.
_WORKDIR = re.compile(
    r"^(~/?)?([A-Za-z0-9_./@+:-]|\$[A-Za-z_][A-Za-z0-9_]*|\$\{[A-Za-z_][A-Za-z0-9_]*\})*$"
)


def _remote(node: object) -> tuple[str, str, tuple[str, ...]]:
    """cluster.remote's keys, checked (docs/remote.md)."""
    d = _Keys("cluster.remote", _check_keys("cluster.remote", node or {}, REMOTE_KEYS))
    workdir = d.text("workdir") or "~/jzk"
    if not _WORKDIR.match(workdir):
        raise SpecError(
            Problem(
                "cluster.remote.workdir",
                workdir,
                "may hold only a path, a leading ~ and $VARIABLES (no spaces, quotes or ;)",
                "e.g. $WORK/jzk",
            )
        )
    return workdir, d.text("python") or "python3", d.texts("setup")
