"""What a script's process looks like to what it detects (distributed/script_env.py
launcher_env): torchrun's variables locally, Slurm's own on an srun task, Slurm's task
variables per worker under torchrun, and submitit's executor everywhere. The pure mapping
table-driven, then the same environments read by the real idr_torch, submitit and
Lightning (one subprocess): every reader finds the world RANK/WORLD_SIZE describe."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from jeanzay_kit.distributed.ranks import RankInfo, rank_info_from_env
from jeanzay_kit.distributed.script_env import launcher_env, script_env

# A task of `srun` (one per GPU) on 2 nodes x 2 GPUs, rank 3, as Slurm 23 sets it.
SRUN_TASK = {
    "PATH": "/usr/bin:/bin",
    "SLURM_JOB_ID": "1234567",
    "SLURM_JOB_NAME": "idr",
    "SLURM_JOB_NUM_NODES": "2",
    "SLURM_NNODES": "2",
    "SLURM_JOB_NODELIST": "n[1-2]",
    "SLURM_NODELIST": "n[1-2]",
    "SLURM_NTASKS": "4",
    "SLURM_NPROCS": "4",
    "SLURM_NTASKS_PER_NODE": "2",
    "SLURM_TASKS_PER_NODE": "2(x2)",
    "SLURM_CPUS_PER_TASK": "10",
    "SLURM_STEP_ID": "0",
    "SLURM_STEPID": "0",
    "SLURM_STEP_NUM_TASKS": "4",
    "SLURM_STEP_NUM_NODES": "2",
    "SLURM_STEP_NODELIST": "n[1-2]",
    "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
    "SLURM_PROCID": "3",
    "SLURM_LOCALID": "1",
    "SLURM_NODEID": "1",
    "SLURM_GTIDS": "2,3",
}
# The torchrun agent of node 1 (parallel.launcher=torchrun: one srun task per node,
# --cpus-per-task the node's 20 CPUs), and what its torchrun gave worker 1 of that node.
AGENT_TASK = {
    **SRUN_TASK,
    "SLURM_NTASKS": "2",
    "SLURM_NPROCS": "2",
    "SLURM_NTASKS_PER_NODE": "1",
    "SLURM_TASKS_PER_NODE": "1(x2)",
    "SLURM_CPUS_PER_TASK": "20",
    "SLURM_STEP_NUM_TASKS": "2",
    "SLURM_STEP_TASKS_PER_NODE": "1(x2)",
    "SLURM_PROCID": "1",
    "SLURM_LOCALID": "0",
    "SLURM_GTIDS": "1",
}
TORCHRUN_WORKER = {
    **AGENT_TASK,
    "RANK": "3",
    "LOCAL_RANK": "1",
    "WORLD_SIZE": "4",
    "LOCAL_WORLD_SIZE": "2",
    "GROUP_RANK": "1",
    "GROUP_WORLD_SIZE": "2",
    "ROLE_RANK": "3",
    "ROLE_WORLD_SIZE": "4",
    "ROLE_NAME": "default",
    "MASTER_ADDR": "n1",
    "MASTER_PORT": "17447",
    "TORCHELASTIC_RUN_ID": "1234567",
    "TORCHELASTIC_RESTART_COUNT": "0",
    "TORCHELASTIC_MAX_RESTARTS": "0",
    "TORCHELASTIC_USE_AGENT_STORE": "True",
}
# A batch shell (no step of its own) where `jzk train` starts 2 processes itself.
BATCH_SHELL = {
    "PATH": "/usr/bin:/bin",
    "SLURM_JOB_ID": "88",
    "SLURM_JOB_NAME": "mine",
    "SLURM_JOB_NUM_NODES": "1",
    "SLURM_NNODES": "1",
    "SLURM_JOB_NODELIST": "n1",
    "SLURM_NODELIST": "n1",
    "SLURM_NTASKS": "1",
    "SLURM_TASKS_PER_NODE": "1",
    "SLURM_CPUS_PER_TASK": "4",
    "SLURM_PROCID": "0",
    "SLURM_LOCALID": "0",
    "SLURM_NODEID": "0",
}


def local(rank: int, world: int = 2) -> RankInfo:
    """A process of `jzk train` on this machine (node/local_ranks.py)."""
    return RankInfo(rank, rank, world, world, 0, 1, "127.0.0.1", 29411, None, launcher="local")


ELASTIC = {
    "TORCHELASTIC_RUN_ID": "4242",
    "TORCHELASTIC_RESTART_COUNT": "0",
    "TORCHELASTIC_MAX_RESTARTS": "0",
    "TORCHELASTIC_USE_AGENT_STORE": "False",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
}
ROLE_1_OF_2 = {"ROLE_RANK": "1", "ROLE_WORLD_SIZE": "2", "ROLE_NAME": "default"}
# Process 1 of 2 that `jzk train` starts in BATCH_SHELL.
IN_BATCH_SHELL = {
    **ROLE_1_OF_2,
    **ELASTIC,
    "SLURM_PROCID": "1",
    "SLURM_LOCALID": "1",
    "SLURM_NTASKS": "2",
    "SLURM_NPROCS": "2",
    "SLURM_STEP_NUM_TASKS": "2",
    "SLURM_NTASKS_PER_NODE": "2",
    "SLURM_TASKS_PER_NODE": "2",
    "SLURM_STEP_TASKS_PER_NODE": "2",
    "SLURM_GTIDS": "0,1",
    "SLURM_CPUS_PER_TASK": "2",
    "SUBMITIT_EXECUTOR": "slurm",
}


@pytest.mark.parametrize(
    ("base", "info", "added", "removed"),
    [
        pytest.param(
            {"PATH": "/bin"},
            local(1),
            {
                **ROLE_1_OF_2,
                **ELASTIC,
                "SUBMITIT_EXECUTOR": "local",
                "SUBMITIT_LOCAL_JOB_ID": "4242",
                "SUBMITIT_LOCAL_NTASKS": "2",
                "SUBMITIT_LOCAL_JOB_NUM_NODES": "1",
                "SUBMITIT_LOCAL_NODEID": "0",
                "SUBMITIT_LOCAL_GLOBALID": "1",
                "SUBMITIT_LOCAL_LOCALID": "1",
            },
            (),
            id="local: torchrun's whole set, submitit's local executor",
        ),
        pytest.param(
            {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "3", "SUBMITIT_EXECUTOR": "local"},
            local(1),
            {**ROLE_1_OF_2, **ELASTIC, "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3"},
            (),
            id="local: a value of the user's own is kept, as torchrun keeps it",
        ),
        pytest.param(
            BATCH_SHELL,
            local(1),
            IN_BATCH_SHELL,
            (),
            id="local inside an allocation: Slurm's task variables per process",
        ),
        pytest.param(
            {**BATCH_SHELL, "SLURM_STEP_ID": "4294967291"},
            local(1),
            IN_BATCH_SHELL,
            ("SLURM_STEP_ID",),
            id="local inside the batch step: no step id",
        ),
        pytest.param(
            SRUN_TASK,
            rank_info_from_env(SRUN_TASK),
            {
                "ROLE_RANK": "3",
                "ROLE_WORLD_SIZE": "4",
                "ROLE_NAME": "default",
                "SUBMITIT_EXECUTOR": "slurm",
            },
            (),
            id="srun task: Slurm's own variables, no TORCHELASTIC_*",
        ),
        pytest.param(
            {**SRUN_TASK, "SUBMITIT_EXECUTOR": "slurm"},
            rank_info_from_env(SRUN_TASK),
            {"ROLE_RANK": "3", "ROLE_WORLD_SIZE": "4", "ROLE_NAME": "default"},
            (),
            id="srun task of submitit's own script",
        ),
        pytest.param(
            TORCHRUN_WORKER,
            rank_info_from_env(TORCHRUN_WORKER),
            {
                "SLURM_PROCID": "3",
                "SLURM_LOCALID": "1",
                "SLURM_NODEID": "1",
                "SLURM_NTASKS": "4",
                "SLURM_NPROCS": "4",
                "SLURM_STEP_NUM_TASKS": "4",
                "SLURM_NTASKS_PER_NODE": "2",
                "SLURM_TASKS_PER_NODE": "2(x2)",
                "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
                "SLURM_GTIDS": "2,3",
                "SLURM_CPUS_PER_TASK": "10",
                "SUBMITIT_EXECUTOR": "slurm",
            },
            ("SLURM_STEP_ID", "SLURM_STEPID"),
            id="torchrun worker: Slurm's task variables of its rank, no step id",
        ),
    ],
)
def test_each_process_looks_like_what_started_it(
    base: dict[str, str], info: RankInfo, added: dict[str, str], removed: tuple[str, ...]
) -> None:
    env = launcher_env(base, info, "4242")
    assert {k: env[k] for k in added if k in env} == added
    assert not set(removed) & set(env)
    # Everything else of the task's environment is passed on as it was.
    untouched = set(base) - set(added) - set(removed)
    assert {k: env[k] for k in untouched} == {k: base[k] for k in untouched}
    if info.launcher == "srun":
        assert "TORCHELASTIC_RUN_ID" not in env


def test_torchruns_own_variables_are_left_to_it() -> None:
    worker = {**TORCHRUN_WORKER, "ROLE_NAME": "trainer", "TORCHELASTIC_RESTART_COUNT": "2"}
    env = launcher_env(worker, rank_info_from_env(worker), "other")
    assert env["ROLE_NAME"] == "trainer" and env["TORCHELASTIC_RESTART_COUNT"] == "2"
    assert env["TORCHELASTIC_RUN_ID"] == "1234567"


def test_the_toolkits_own_reader_finds_the_same_rank_in_every_view() -> None:
    for base, info in [
        (SRUN_TASK, rank_info_from_env(SRUN_TASK)),
        (TORCHRUN_WORKER, rank_info_from_env(TORCHRUN_WORKER)),
        (BATCH_SHELL, local(1)),
    ]:
        env = {**launcher_env(base, info, "9"), **script_env(info, "/run")}
        seen = rank_info_from_env(env)
        assert (seen.rank, seen.local_rank, seen.world_size) == (
            info.rank,
            info.local_rank,
            info.world_size,
        )


# What each library reads, in one process: idr_torch and submitit read os.environ at
# every call, Lightning's environments too.
PROBE = r"""
import json, os, sys, warnings
warnings.simplefilter("ignore")
import idr_torch, submitit
try:
    from lightning.fabric.plugins.environments import SLURMEnvironment, TorchElasticEnvironment
except ImportError:
    SLURMEnvironment = TorchElasticEnvironment = None
out = []
for env in json.load(sys.stdin):
    os.environ.clear()
    os.environ.update(env)
    job = submitit.JobEnvironment()
    seen = {
        "idr_torch": [idr_torch.current_API, idr_torch.rank, idr_torch.local_rank,
                      idr_torch.size],
        "submitit": [job.cluster, job.global_rank, job.local_rank, job.num_tasks],
    }
    if SLURMEnvironment is not None:
        # Lightning's order (accelerator_connector.py): TorchElastic first, then SLURM.
        kind = next(k for k in (TorchElasticEnvironment, SLURMEnvironment) if k.detect())
        lit = kind()
        seen["lightning"] = [kind.__name__, lit.global_rank(), lit.local_rank(),
                             lit.world_size()]
    out.append(seen)
print(json.dumps(out))
"""


def test_idr_torch_submitit_and_lightning_read_the_world_of_rank_and_world_size() -> None:
    pytest.importorskip("idr_torch")
    cases = [
        ({"PATH": "/bin"}, local(1), ("TorchElastic", "local", "TorchElasticEnvironment")),
        (BATCH_SHELL, local(1), ("TorchElastic", "slurm", "TorchElasticEnvironment")),
        (SRUN_TASK, rank_info_from_env(SRUN_TASK), ("Slurm", "slurm", "SLURMEnvironment")),
        (
            TORCHRUN_WORKER,
            rank_info_from_env(TORCHRUN_WORKER),
            ("TorchElastic", "slurm", "TorchElasticEnvironment"),
        ),
    ]
    envs = [{**launcher_env(b, i, "4242"), **script_env(i, "/run")} for b, i, _ in cases]
    # As torchrun alone leaves its worker: the agent's Slurm task variables.
    envs.append({**TORCHRUN_WORKER, "SUBMITIT_EXECUTOR": "slurm"})
    probe = subprocess.run(
        [sys.executable, "-c", PROBE],
        input=json.dumps(envs),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert probe.returncode == 0, probe.stderr[-3000:]
    *seen, bare = json.loads(probe.stdout)
    readers_expected = 3 if importlib.util.find_spec("lightning") else 2
    for (_, info, kinds), readers in zip(cases, seen, strict=True):
        assert len(readers) == readers_expected, readers
        world = [info.rank, info.local_rank, info.world_size]
        for (name, got), kind in zip(readers.items(), kinds, strict=False):
            assert got == [kind, *world], (name, got, kind, world)
    # Without the mapping, idr_torch took the agent's step: rank 1 of 2, not 3 of 4.
    assert bare["idr_torch"] == ["Slurm", 1, 0, 2]
    assert bare["submitit"] == ["slurm", 1, 0, 2]
