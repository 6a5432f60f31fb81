"""Rank derivation from launcher variables, as srun and torchrun set them."""

from __future__ import annotations

import pytest

from jeanzay_kit.distributed.ranks import (
    PORT_BASE,
    PORT_SPAN,
    RankInfo,
    master_port,
    parse_tasks_per_node,
    rank_info_from_env,
)
from jeanzay_kit.errors import RankEnvError

# What srun sets for task 5 of `sbatch --nodes=2 --ntasks-per-node=4` (block distribution).
SRUN_2x4 = {
    "SLURM_JOB_ID": "123456",
    "SLURM_PROCID": "5",
    "SLURM_LOCALID": "1",
    "SLURM_NODEID": "1",
    "SLURM_NTASKS": "8",
    "SLURM_NNODES": "2",
    "SLURM_JOB_NODELIST": "r7i[0-1]n3",
    "SLURM_TASKS_PER_NODE": "4(x2)",
    "SLURM_STEP_ID": "0",
    "SLURM_STEP_NUM_TASKS": "8",
    "SLURM_STEP_NUM_NODES": "2",
    "SLURM_STEP_NODELIST": "r7i[0-1]n3",
    "SLURM_STEP_TASKS_PER_NODE": "4(x2)",
}

CASES = [
    pytest.param(
        {},
        RankInfo(0, 0, 1, 1, 0, 1, "127.0.0.1", 29500, None, None, "local"),
        id="no launcher: one local process",
    ),
    pytest.param(
        SRUN_2x4,
        RankInfo(5, 1, 8, 4, 1, 2, "r7i0n3", master_port(123456), "123456", None, "srun"),
        id="srun task, 2 nodes x 4",
    ),
    pytest.param(
        # A step on one node of a 2-node allocation: the step variables win.
        {
            **SRUN_2x4,
            "SLURM_PROCID": "1",
            "SLURM_NODEID": "0",
            "SLURM_STEP_NUM_TASKS": "2",
            "SLURM_STEP_NUM_NODES": "1",
            "SLURM_STEP_NODELIST": "r7i1n3",
            "SLURM_STEP_TASKS_PER_NODE": "2",
        },
        RankInfo(1, 1, 2, 2, 0, 1, "r7i1n3", master_port(123456), "123456", None, "srun"),
        id="srun step smaller than the job: SLURM_STEP_* preferred",
    ),
    pytest.param(
        # The batch script itself: no step variables, job-level ones only.
        {k: v for k, v in SRUN_2x4.items() if not k.startswith("SLURM_STEP")}
        | {"SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0"},
        RankInfo(0, 0, 8, 4, 0, 2, "r7i0n3", master_port(123456), "123456", None, "srun"),
        id="job-level variables only",
    ),
    pytest.param(
        # Job-level values are ignored outside a step even when stale step values exist.
        {
            **{k: v for k, v in SRUN_2x4.items() if k != "SLURM_STEP_ID"},
            "SLURM_STEP_NUM_TASKS": "99",
        },
        RankInfo(5, 1, 8, 4, 1, 2, "r7i0n3", master_port(123456), "123456", None, "srun"),
        id="no SLURM_STEP_ID: job-level wins",
    ),
    pytest.param(
        {
            **SRUN_2x4,
            "SLURM_STEP_TASKS_PER_NODE": "3,5",
            "SLURM_TASKS_PER_NODE": "3,5",
            "SLURM_PROCID": "7",
            "SLURM_LOCALID": "4",
        },
        RankInfo(7, 4, 8, 5, 1, 2, "r7i0n3", master_port(123456), "123456", None, "srun"),
        id="uneven tasks per node",
    ),
    pytest.param(
        {
            **SRUN_2x4,
            "SLURM_JOB_ID": "777",
            "SLURM_ARRAY_JOB_ID": "770",
            "SLURM_ARRAY_TASK_ID": "7",
        },
        RankInfo(5, 1, 8, 4, 1, 2, "r7i0n3", master_port(777), "777", "770_7", "srun"),
        id="array task: port from its own job id, requeue id in array form",
    ),
    pytest.param(
        {**SRUN_2x4, "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "40000"},
        RankInfo(5, 1, 8, 4, 1, 2, "10.0.0.1", 40000, "123456", None, "srun"),
        id="MASTER_ADDR and MASTER_PORT override",
    ),
    pytest.param(
        # torchrun started by srun with one task per node: torchrun's variables win.
        {
            **SRUN_2x4,
            "SLURM_PROCID": "1",
            "SLURM_LOCALID": "0",
            "SLURM_NODEID": "1",
            "SLURM_STEP_NUM_TASKS": "2",
            "SLURM_STEP_TASKS_PER_NODE": "1(x2)",
            "RANK": "6",
            "LOCAL_RANK": "2",
            "WORLD_SIZE": "8",
            "LOCAL_WORLD_SIZE": "4",
            "GROUP_RANK": "1",
            "GROUP_WORLD_SIZE": "2",
            "MASTER_ADDR": "r7i0n3",
            "MASTER_PORT": "29400",
            "TORCHELASTIC_RUN_ID": "123456",
        },
        RankInfo(6, 2, 8, 4, 1, 2, "r7i0n3", 29400, "123456", None, "torchrun"),
        id="torchrun under srun",
    ),
    pytest.param(
        {
            "RANK": "3",
            "LOCAL_RANK": "3",
            "WORLD_SIZE": "4",
            "LOCAL_WORLD_SIZE": "4",
            "MASTER_ADDR": "localhost",
            "MASTER_PORT": "29500",
        },
        RankInfo(3, 3, 4, 4, 0, 1, "localhost", 29500, None, None, "torchrun"),
        id="torchrun alone, node rank derived",
    ),
]


@pytest.mark.parametrize(("env", "expected"), CASES)
def test_rank_info_table(env: dict[str, str], expected: RankInfo) -> None:
    assert rank_info_from_env(env) == expected


BAD = [
    pytest.param({**SRUN_2x4, "SLURM_PROCID": "8"}, "SLURM_PROCID=8 is outside", id="rank>=world"),
    pytest.param({**SRUN_2x4, "SLURM_LOCALID": "4"}, "SLURM_LOCALID=4", id="local rank"),
    pytest.param({**SRUN_2x4, "SLURM_NODEID": "2"}, "SLURM_NODEID=2", id="node id"),
    pytest.param({**SRUN_2x4, "SLURM_STEP_NUM_TASKS": "6"}, "adds up to 8 tasks", id="sum"),
    pytest.param({**SRUN_2x4, "SLURM_STEP_NODELIST": "r7i0n[3-5]"}, "names 3 nodes", id="nodes"),
    pytest.param({**SRUN_2x4, "SLURM_STEP_TASKS_PER_NODE": "4"}, "describes 1 nodes", id="tpn"),
    pytest.param({**SRUN_2x4, "SLURM_STEP_TASKS_PER_NODE": "4(y2)"}, "cannot read", id="tpn fmt"),
    pytest.param({**SRUN_2x4, "SLURM_STEP_NODELIST": "n[1-"}, "SLURM_STEP_NODELIST", id="list"),
    pytest.param({**SRUN_2x4, "SLURM_PROCID": "x"}, "not a non-negative integer", id="garbage"),
    pytest.param({"SLURM_PROCID": "0"}, "SLURM_LOCALID is not set", id="partial srun env"),
    pytest.param(
        {"SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0"},
        "the number of tasks is not",
        id="no task count",
    ),
    pytest.param({**SRUN_2x4, "MASTER_PORT": "70000"}, "MASTER_PORT", id="bad port"),
    pytest.param(
        {
            "RANK": "4",
            "LOCAL_RANK": "0",
            "WORLD_SIZE": "4",
            "LOCAL_WORLD_SIZE": "4",
            "MASTER_ADDR": "h",
        },
        "RANK=4 is outside",
        id="torchrun rank",
    ),
    pytest.param(
        {
            "RANK": "0",
            "LOCAL_RANK": "0",
            "WORLD_SIZE": "6",
            "LOCAL_WORLD_SIZE": "4",
            "MASTER_ADDR": "h",
        },
        "not a multiple",
        id="torchrun sizes",
    ),
    pytest.param(
        {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "4"},
        "MASTER_ADDR",
        id="torchrun no master",
    ),
    pytest.param(
        {"RANK": "0", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "4", "MASTER_ADDR": "h"},
        "WORLD_SIZE is not set",
        id="torchrun partial",
    ),
]


@pytest.mark.parametrize(("env", "message"), BAD)
def test_inconsistent_variables_raise_a_clear_error(env: dict[str, str], message: str) -> None:
    with pytest.raises(RankEnvError, match=message.replace("(", r"\(")):
        rank_info_from_env(env)


def test_master_port_stays_below_the_ephemeral_range() -> None:
    ports = {master_port(job) for job in range(0, 3 * PORT_SPAN, 7)}
    assert min(ports) == PORT_BASE
    assert max(ports) <= 32767  # Linux ip_local_port_range starts at 32768
    assert master_port(123456) == PORT_BASE + 123456 % PORT_SPAN
    assert master_port("1234_5") == master_port(1234)  # array form tolerated
    assert master_port(None) == 29500


def test_master_port_rejects_garbage() -> None:
    with pytest.raises(RankEnvError, match="not a number"):
        master_port("abc")


def test_rank_info_properties() -> None:
    info = rank_info_from_env(SRUN_2x4)
    assert info.distributed and not info.is_main
    assert info.init_method == f"tcp://r7i0n3:{master_port(123456)}"
    assert info.requeue_id == "123456"
    v6 = RankInfo(0, 0, 2, 2, 0, 1, "::1", 1234, None)
    assert v6.init_method == "tcp://[::1]:1234"


@pytest.mark.parametrize(
    ("text", "counts"),
    [("4", [4]), ("4(x2)", [4, 4]), ("2(x3),1", [2, 2, 2, 1]), ("1,2,3", [1, 2, 3])],
)
def test_parse_tasks_per_node(text: str, counts: list[int]) -> None:
    assert parse_tasks_per_node(text) == counts


def test_reading_never_writes_the_environment() -> None:
    env = dict(SRUN_2x4)
    rank_info_from_env(env)
    assert env == SRUN_2x4
