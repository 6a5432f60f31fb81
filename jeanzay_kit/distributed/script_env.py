"""A script task: the user's own command on every task, with the environment a torchrun
script expects. Pure: values in, values out.

`job.entry` names what each task runs. The toolkit's own loop is `-m
jeanzay_kit.train_app` (the default), given the frozen config as Hydra's arguments. Any
other entry is the user's command (`path/to/script.py` or `-m package.module`): it gets
exactly `job.args`, never Hydra's arguments, and in its environment the variables of
torchrun's contract (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR,
MASTER_PORT, GROUP_RANK, GROUP_WORLD_SIZE) plus JZK_RUN_DIR, the run directory, the same
on every requeue, and SETTINGS_ENV, the job's settings for a session the script opens.
`job.entry_kind` says it when the rule guesses wrong: `toolkit` for a Hydra application
of yours that calls the toolkit, `script` for a command that happens to be the module.

Each process also looks like what started it (`launcher_env`), so that what scripts and
their libraries detect (idr_torch, submitit.JobEnvironment, Lightning's environments,
torch.distributed.is_torchelastic_launched) describes the same world as RANK/WORLD_SIZE:

| started by            | torchrun's variables   | SLURM_* task variables | SUBMITIT_EXECUTOR |
|-----------------------|------------------------|------------------------|-------------------|
| `jzk train`, locally  | all, TORCHELASTIC_*    | per process (*)        | local, its ids    |
| an srun task          | all but TORCHELASTIC_* | Slurm's own            | slurm             |
| a torchrun worker     | torchrun's own         | per worker             | slurm             |

(*) only inside a Slurm allocation. "Per process": SLURM_PROCID, SLURM_NTASKS, ... of
its rank, and no SLURM_STEP_ID. Why the rows differ:
- An srun task is a Slurm task: its SLURM_* variables are already the world's. It gets no
  TORCHELASTIC_RUN_ID, because the libraries that see one take torchrun's path first
  (Lightning's TorchElasticEnvironment over its SLURMEnvironment, whose requeue on
  SIGUSR1 scripts rely on).
- Processes started inside one Slurm task (torchrun's workers, the local launcher's
  processes in an allocation) inherited that task's SLURM_PROCID/SLURM_NTASKS: every
  worker of a node read the same rank (idr_torch under torchrun: 4 workers became two
  pairs of rank 0/1 of size 2). Each gets the task variables of its rank, as if srun had
  started it, and no SLURM_STEP_ID: idr_torch (>= 2) takes the step's variables before
  torchrun's when SLURM_STEP_ID is set, then overwrites MASTER_PORT with its own formula
  (10000 + job id mod 20000), which is not the port of torchrun's store.
- submitit.JobEnvironment() knows a job by SUBMITIT_EXECUTOR alone, which only
  submitit's own batch script exports ("Could not figure out which environment the job
  is runnning in" in a script task before).

torchrun's worker variables are those of torch/distributed/elastic/agent/server/
local_elastic_agent.py (_start_workers, torch 2.13). Two are left out on purpose:
TORCHELASTIC_ERROR_FILE (a file only torchrun's agent reads back) and OMP_NUM_THREADS
(torchrun's 1 when unset is a guard against oversubscription, not an identity; the
rendered scripts export each task's share, the local launcher its processes' share:
node/script_task.py run_here).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence

from jeanzay_kit.distributed.ranks import RankInfo

# The job's runtime settings (JSON) for a session the script opens: config/runtime_settings.py
# reads it. Named here, below both, so the writer and the reader agree.
SETTINGS_ENV = "JZK_SESSION_SETTINGS"
# Set by `jzk rehearse` in its run's environment: rank 0 then looks for the rehearsal's
# fault files (rundir/run_layout.py FAULT_NAN); no stat per step otherwise.
REHEARSAL_ENV = "JZK_REHEARSAL"


# torchrun's --role default: one role, whose ranks are the world's.
TORCHRUN_ROLE = "default"
# What makes a process a task of a Slurm step, for idr_torch (SLURM_STEP_ID) and for
# Slurm's older name of it.
STEP_ID_NAMES = ("SLURM_STEP_ID", "SLURM_STEPID")


def script_argv(python: str, entry: str, args: Sequence[str]) -> list[str]:
    """The command each task runs: the interpreter, the entry (a script path or `-m
    module`), then exactly job.args."""
    return [python, *shlex.split(entry), *args]


def script_env(info: RankInfo, run_dir: str, settings: str = "") -> dict[str, str]:
    """The variables a torchrun-style script reads (torch.distributed's env:// init), where
    its run directory is, and the job's runtime settings for a session it opens
    (settings: config/runtime_settings.py to_env; SETTINGS_ENV there names the variable)."""
    env = {
        "RANK": str(info.rank),
        "LOCAL_RANK": str(info.local_rank),
        "WORLD_SIZE": str(info.world_size),
        "LOCAL_WORLD_SIZE": str(info.local_world_size),
        "GROUP_RANK": str(info.node_rank),
        "GROUP_WORLD_SIZE": str(info.num_nodes),
        "MASTER_ADDR": info.master_addr,
        "MASTER_PORT": str(info.master_port),
        "JZK_RUN_DIR": run_dir,
    }
    if info.job_id:
        env["JZK_JOB_ID"] = info.requeue_id or info.job_id
    if settings:
        env[SETTINGS_ENV] = settings
    return env


def launcher_env(base: Mapping[str, str], info: RankInfo, run_id: str) -> dict[str, str]:
    """The environment of one process of the user's command: `base` (what the task or
    the local launcher has) made to look like what started the process (module
    docstring's table). `run_id` names a run of processes the toolkit starts itself
    (TORCHELASTIC_RUN_ID, submitit's local job id): the launcher's, unique while it
    runs."""
    in_slurm = bool(base.get("SLURM_JOB_ID"))
    # Several processes started inside one Slurm task: none of them is the step's task.
    inside_task = in_slurm and info.launcher != "srun"
    env = {k: v for k, v in base.items() if not (inside_task and k in STEP_ID_NAMES)}
    if info.launcher != "torchrun":  # torchrun sets these itself (with its --role)
        env.update(
            ROLE_RANK=str(info.rank),
            ROLE_WORLD_SIZE=str(info.world_size),
            ROLE_NAME=TORCHRUN_ROLE,
        )
    if info.launcher == "local":
        env.update(elastic_env(base, run_id))
    if inside_task:
        env.update(slurm_task_env(base, info))
    env.update(submitit_env(base, info, run_id))
    return env


def elastic_env(base: Mapping[str, str], run_id: str) -> dict[str, str]:
    """What torchrun's agent adds to the rank variables (local_elastic_agent.py), for
    processes the toolkit starts on this machine: one start (no restarts of the group,
    as torchrun's --max-restarts=0), no agent store (rank 0 hosts the TCP store)."""
    return {
        "TORCHELASTIC_RUN_ID": run_id,
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0",
        "TORCHELASTIC_USE_AGENT_STORE": "False",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": base.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
    }


def slurm_task_env(base: Mapping[str, str], info: RankInfo) -> dict[str, str]:
    """Slurm's task variables as srun would have set them had it started this process
    as a task of its own: rank, local rank, node, task counts; the CPUs of the task it
    runs in shared by the processes of its node (SLURM_CPUS_PER_TASK, where set)."""
    per_node, nodes = info.local_world_size, info.num_nodes
    counts = f"{per_node}(x{nodes})" if nodes > 1 else str(per_node)
    first = info.node_rank * per_node
    env = {
        "SLURM_PROCID": str(info.rank),
        "SLURM_LOCALID": str(info.local_rank),
        "SLURM_NODEID": str(info.node_rank),
        "SLURM_NTASKS": str(info.world_size),
        "SLURM_NPROCS": str(info.world_size),
        "SLURM_STEP_NUM_TASKS": str(info.world_size),
        "SLURM_NTASKS_PER_NODE": str(per_node),
        "SLURM_TASKS_PER_NODE": counts,
        "SLURM_STEP_TASKS_PER_NODE": counts,
        "SLURM_GTIDS": ",".join(str(first + i) for i in range(per_node)),
    }
    cpus = base.get("SLURM_CPUS_PER_TASK", "")
    if cpus.isdigit():
        env["SLURM_CPUS_PER_TASK"] = str(max(1, int(cpus) // per_node))
    return env


def submitit_env(base: Mapping[str, str], info: RankInfo, run_id: str) -> dict[str, str]:
    """What submitit.JobEnvironment() needs to know where it runs: SUBMITIT_EXECUTOR
    (kept when set: submitit's own batch script), and outside Slurm its local
    executor's ids, which JobEnvironment reads instead of SLURM_*."""
    if base.get("SUBMITIT_EXECUTOR"):
        return {}
    if base.get("SLURM_JOB_ID"):
        return {"SUBMITIT_EXECUTOR": "slurm"}
    return {
        "SUBMITIT_EXECUTOR": "local",
        "SUBMITIT_LOCAL_JOB_ID": run_id,
        "SUBMITIT_LOCAL_NTASKS": str(info.world_size),
        "SUBMITIT_LOCAL_JOB_NUM_NODES": str(info.num_nodes),
        "SUBMITIT_LOCAL_NODEID": str(info.node_rank),
        "SUBMITIT_LOCAL_GLOBALID": str(info.rank),
        "SUBMITIT_LOCAL_LOCALID": str(info.local_rank),
    }


def entry_problem(entry: str, is_file: bool, module_found: bool) -> str | None:
    """Why job.entry cannot run (None: it can), from what the caller saw on disk."""
    words = shlex.split(entry)
    if not words:
        return (
            "job.entry is empty. HINT: give a script (job.entry=train_ddp.py) or -m package.module"
        )
    if words[0] == "-m":
        if len(words) != 2:
            return (
                f"job.entry={entry!r} must be `-m package.module` alone. HINT: put the "
                "command's arguments in job.args='[--epochs,10]'"
            )
        if not module_found:
            return (
                f"job.entry={entry!r}: no module {words[1]} can be imported from the project "
                "(its root is on the path) or the environment. HINT: check the name, or "
                "install the package in the environment job.python runs"
            )
        return None
    if len(words) != 1:
        return (
            f"job.entry={entry!r} holds more than a script path. HINT: put the script's "
            "arguments in job.args='[--epochs,10]'"
        )
    if not is_file:
        return (
            f"job.entry={entry!r} is not a file (relative paths are relative to job.workdir, "
            "or to where you run the command). HINT: give the script's path"
        )
    return None
