"""Who am I in the job? Rank, local rank, world size and rendezvous from launcher variables.

Pure: `rank_info_from_env` takes a mapping (the entry point passes `os.environ` once)
and never writes anything back. Three launchers are understood, in this order:

1. torchrun (one task per node, torchrun starts the GPU workers): RANK, LOCAL_RANK,
   WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT. torchrun is
   often started by srun, so SLURM_* variables are present too; torchrun's win
   because they describe the worker, SLURM's describe the torchrun agent.
2. srun (one task per GPU): SLURM_PROCID, SLURM_LOCALID, SLURM_NODEID and the task
   counts. Inside a job step the SLURM_STEP_* variables describe the step actually
   running (which can be smaller than the allocation), so they are preferred over the
   job-level SLURM_NTASKS / SLURM_NNODES / SLURM_JOB_NODELIST / SLURM_TASKS_PER_NODE.
3. Neither: a single process on this machine.

The master address is the first host of the step's nodelist (the node of rank 0 under
Slurm's default block distribution); MASTER_ADDR overrides it. The port comes from
`master_port(job_id)`; MASTER_PORT overrides it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

from jeanzay_kit.errors import HostlistError, RankEnvError
from jeanzay_kit.slurm_syntax.hostlist import expand_hostlist

# Linux hands out ephemeral (client) ports from 32768-60999 by default
# (/proc/sys/net/ipv4/ip_local_port_range). A rendezvous port in that range can be
# taken by any outgoing connection on the node, so the formula stays below it, and
# above the well-known and common service ports.
PORT_BASE = 10000
PORT_SPAN = 22768  # PORT_BASE + PORT_SPAN - 1 == 32767, the last port below the ephemeral range
DEFAULT_LOCAL_PORT = 29500  # torch's own default, for a job with no Slurm id


def master_port(job_id: str | int | None) -> int:
    """The rendezvous port of a job: 10000 + job_id mod 22768, always in [10000, 32767].

    Every task of a job computes the same port from the same SLURM_JOB_ID, and two jobs
    sharing a node only collide when their ids are 22768 apart. Set MASTER_PORT to
    choose a port yourself. Without a job id (a local run) the port is 29500.
    """
    if job_id is None or job_id == "":
        return DEFAULT_LOCAL_PORT
    digits = str(job_id).split("_")[0]  # tolerate an array id such as "1234_7"
    if not digits.isdigit():
        raise RankEnvError(f"job id {job_id!r} is not a number; cannot derive a master port")
    return PORT_BASE + int(digits) % PORT_SPAN


# How many ports rank 0 tries (the job's, then fallbacks) when the job's is taken.
CANDIDATES = 8
# A step between candidates that is prime to PORT_SPAN: the list stays in the range and
# two neighbouring job ids do not walk into each other's ports.
_STRIDE = 7919


def candidate_ports(port: int, count: int = CANDIDATES) -> list[int]:
    """`port`, then the ports rank 0 falls back to, in order; all in the job port range
    (distributed/rendezvous.py for the toolkit's loop, node/script_port.py for scripts)."""
    if not PORT_BASE <= port < PORT_BASE + PORT_SPAN:
        return [port]  # a MASTER_PORT chosen by hand: only that one
    offset = port - PORT_BASE
    return [PORT_BASE + (offset + i * _STRIDE) % PORT_SPAN for i in range(count)]


@dataclass(frozen=True)
class RankInfo:
    """Where one process sits in the job; everything `init_process_group` needs."""

    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    node_rank: int
    num_nodes: int
    master_addr: str
    master_port: int
    job_id: str | None  # SLURM_JOB_ID (unique per array task), None outside Slurm
    array_job_id: str | None = None  # "<SLURM_ARRAY_JOB_ID>_<SLURM_ARRAY_TASK_ID>" in an array
    launcher: str = "local"  # "torchrun" | "srun" | "local"
    # $JZK_REQUEUE_FILE: in a container (job.container), where a requeue is asked of the
    # batch shell outside it; None: `scontrol requeue` (ending/requeue.py requeue_job).
    requeue_file: str | None = None

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def init_method(self) -> str:
        host = f"[{self.master_addr}]" if ":" in self.master_addr else self.master_addr
        return f"tcp://{host}:{self.master_port}"

    @property
    def requeue_id(self) -> str | None:
        """The id `scontrol requeue` needs: the array form for an array task."""
        return self.array_job_id or self.job_id


def launched_by(env: Mapping[str, str]) -> str | None:
    """Which launcher started this process as a task: "torchrun" (a worker of torchrun),
    "srun" (a task of a Slurm job step), or None (a user's shell, a batch script, salloc).

    The one place that decides it: train.py trains in this process when it is launched,
    and starts local workers (or refuses a Slurm profile) when it is not."""
    if "TORCHELASTIC_RUN_ID" in env or ("RANK" in env and "LOCAL_RANK" in env):
        return "torchrun"
    if "SLURM_PROCID" in env and ("SLURM_STEP_ID" in env or "SLURM_STEPID" in env):
        return "srun"
    return None


def rank_info_from_env(env: Mapping[str, str]) -> RankInfo:
    """Derive this process's RankInfo from launcher variables; see the module docstring."""
    info = _from_launcher(env)
    return replace(info, requeue_file=env.get("JZK_REQUEUE_FILE") or None)


def _from_launcher(env: Mapping[str, str]) -> RankInfo:
    if launched_by(env) == "torchrun":
        return _from_torchrun(env)
    if "SLURM_PROCID" in env:
        return _from_srun(env)
    job_id = env.get("SLURM_JOB_ID") or None
    return RankInfo(
        rank=0,
        local_rank=0,
        world_size=1,
        local_world_size=1,
        node_rank=0,
        num_nodes=1,
        master_addr=env.get("MASTER_ADDR", "127.0.0.1"),
        master_port=_port(env, job_id),
        job_id=job_id,
        array_job_id=array_id(env),
        launcher="local",
    )


def _opt_int(env: Mapping[str, str], *names: str) -> int | None:
    """The first of `names` present in env, as a non-negative int; None if none is set."""
    for name in names:
        if name in env:
            raw = env[name].strip()
            if not raw.isdigit():
                raise RankEnvError(f"{name}={env[name]!r} is not a non-negative integer")
            return int(raw)
    return None


def _int(env: Mapping[str, str], *names: str) -> int:
    value = _opt_int(env, *names)
    if value is None:
        raise RankEnvError(
            f"{' or '.join(names)} is not set, but other launcher variables are. "
            "HINT: start the training with srun (one task per GPU) or torchrun, "
            "not by hand with a partial environment"
        )
    return value


def _port(env: Mapping[str, str], job_id: str | None) -> int:
    raw = env.get("MASTER_PORT")
    if raw is None or raw == "":
        return master_port(job_id)
    if not raw.isdigit() or not 1 <= int(raw) <= 65535:
        raise RankEnvError(f"MASTER_PORT={raw!r} is not a TCP port (1-65535)")
    return int(raw)


def array_id(env: Mapping[str, str]) -> str | None:
    array_job, task = env.get("SLURM_ARRAY_JOB_ID"), env.get("SLURM_ARRAY_TASK_ID")
    return f"{array_job}_{task}" if array_job and task else None


def _check_range(name: str, value: int, limit_name: str, limit: int) -> None:
    if not 0 <= value < limit:
        raise RankEnvError(f"{name}={value} is outside [0, {limit_name}={limit})")


def _from_torchrun(env: Mapping[str, str]) -> RankInfo:
    rank = _int(env, "RANK")
    local_rank = _int(env, "LOCAL_RANK")
    world = _int(env, "WORLD_SIZE")
    local_world = _int(env, "LOCAL_WORLD_SIZE")
    node_rank = _opt_int(env, "GROUP_RANK")
    num_nodes = _opt_int(env, "GROUP_WORLD_SIZE")
    if world == 0 or local_world == 0:
        raise RankEnvError(f"WORLD_SIZE={world} and LOCAL_WORLD_SIZE={local_world} must be > 0")
    if num_nodes is None:
        if world % local_world:
            raise RankEnvError(
                f"WORLD_SIZE={world} is not a multiple of LOCAL_WORLD_SIZE={local_world} "
                "and GROUP_WORLD_SIZE is not set"
            )
        num_nodes = world // local_world
    if node_rank is None:
        node_rank = rank // local_world
    _check_range("RANK", rank, "WORLD_SIZE", world)
    _check_range("LOCAL_RANK", local_rank, "LOCAL_WORLD_SIZE", local_world)
    _check_range("GROUP_RANK", node_rank, "GROUP_WORLD_SIZE", num_nodes)
    if local_world > world:
        raise RankEnvError(f"LOCAL_WORLD_SIZE={local_world} is larger than WORLD_SIZE={world}")
    if "MASTER_ADDR" not in env:
        raise RankEnvError("torchrun variables are set but MASTER_ADDR is not")
    job_id = env.get("SLURM_JOB_ID") or None
    return RankInfo(
        rank=rank,
        local_rank=local_rank,
        world_size=world,
        local_world_size=local_world,
        node_rank=node_rank,
        num_nodes=num_nodes,
        master_addr=env["MASTER_ADDR"],
        master_port=_port(env, job_id),
        job_id=job_id,
        array_job_id=array_id(env),
        launcher="torchrun",
    )


_TASKS_ITEM = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")


def parse_tasks_per_node(value: str) -> list[int]:
    """Slurm's compact task counts: "2(x3),1" -> [2, 2, 2, 1]."""
    counts: list[int] = []
    for item in value.split(","):
        match = _TASKS_ITEM.match(item.strip())
        if not match:
            raise RankEnvError(f"cannot read tasks per node {value!r} (expected e.g. '2(x3),1')")
        count, repeat = int(match.group(1)), int(match.group(2) or 1)
        counts.extend([count] * repeat)
    return counts


def _check_shape(
    env: Mapping[str, str],
    hostlist: tuple[str, list[str]],
    per_node: tuple[str, list[int]],
    nodes: tuple[str, int],
    world_name: str,
) -> None:
    """The node list, the tasks per node and the counts agree (name, value pairs)."""
    (list_name, hosts), (tpn_name, counts), (nodes_name, num_nodes) = hostlist, per_node, nodes
    world = _int(env, world_name)
    if len(hosts) != num_nodes:
        raise RankEnvError(
            f"{list_name}={env[list_name]!r} names {len(hosts)} nodes but {nodes_name}={num_nodes}"
        )
    if len(counts) != num_nodes:
        raise RankEnvError(
            f"{tpn_name}={env[tpn_name]!r} describes {len(counts)} nodes "
            f"but {nodes_name}={num_nodes}"
        )
    if sum(counts) != world:
        raise RankEnvError(
            f"{tpn_name}={env[tpn_name]!r} adds up to {sum(counts)} tasks but {world_name}={world}"
        )


def _from_srun(env: Mapping[str, str]) -> RankInfo:
    in_step = "SLURM_STEP_ID" in env or "SLURM_STEPID" in env

    def pick(what: str, step_name: str, *job_names: str) -> str:
        """The name of the variable to read: the step's inside a step, else the job's."""
        names = ((step_name,) if in_step else ()) + job_names
        for name in names:
            if env.get(name):
                return name
        raise RankEnvError(
            f"SLURM_PROCID is set but {what} is not ({' / '.join(names)}). "
            "HINT: run the training under srun inside an sbatch/salloc allocation"
        )

    rank = _int(env, "SLURM_PROCID")
    local_rank = _int(env, "SLURM_LOCALID")
    node_rank = _int(env, "SLURM_NODEID")
    world_name = pick("the number of tasks", "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS")
    nodes_name = pick(
        "the number of nodes", "SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES"
    )
    list_name = pick("the node list", "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")
    tpn_name = pick("the tasks per node", "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE")
    world = _int(env, world_name)
    num_nodes = _int(env, nodes_name)
    try:
        hosts = expand_hostlist(env[list_name])
    except HostlistError as err:
        raise RankEnvError(f"{list_name}: {err}") from err
    counts = parse_tasks_per_node(env[tpn_name])

    _check_shape(env, (list_name, hosts), (tpn_name, counts), (nodes_name, num_nodes), world_name)
    _check_range("SLURM_PROCID", rank, world_name, world)
    _check_range("SLURM_NODEID", node_rank, nodes_name, num_nodes)
    local_world = counts[node_rank]
    _check_range("SLURM_LOCALID", local_rank, f"tasks on node {node_rank}", local_world)

    job_id = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID") or None
    return RankInfo(
        rank=rank,
        local_rank=local_rank,
        world_size=world,
        local_world_size=local_world,
        node_rank=node_rank,
        num_nodes=num_nodes,
        master_addr=env.get("MASTER_ADDR") or hosts[0],
        master_port=_port(env, job_id),
        job_id=job_id,
        array_job_id=array_id(env),
        launcher="srun",
    )
