"""Every validation rule, with the message a user reads, and every automatic choice."""

from __future__ import annotations

import pytest

from jeanzay_kit.config.compose import ConfigError, compose_config
from jeanzay_kit.config.spec import JobSpec, build_job_spec
from jeanzay_kit.errors import SpecError

H100 = ["cluster=jeanzay_h100", "cluster.account=abc@h100"]
A100 = ["cluster=jeanzay_a100", "cluster.account=abc@a100"]
V100 = ["cluster=jeanzay_v100", "cluster.account=abc@v100"]
V100_8 = ["cluster=jeanzay_v100_8gpu", "cluster.account=abc@v100"]


def spec(*overrides: str) -> JobSpec:
    return build_job_spec(compose_config(list(overrides)))


def problems(*overrides: str) -> list[str]:
    with pytest.raises(SpecError) as info:
        spec(*overrides)
    return [str(p) for p in info.value.problems]


# (overrides, the one problem expected: every fragment must be in its message)
RULES = [
    pytest.param(
        [*H100, "resources.gpus_per_node=8", "train.global_batch_size=64"],
        [
            "resources.gpus_per_node=8 but jeanzay_h100 nodes have 4 GPUs. "
            "HINT: use resources.nodes=2 resources.gpus_per_node=4"
        ],
        id="gpus above the node",
    ),
    pytest.param(
        [*H100, "resources.partition=gpu_p5"],
        [
            "resources.partition=gpu_p5",
            "not a partition of jeanzay_h100 (gpu_p6)",
            "HINT: use resources.partition=gpu_p6",
        ],
        id="unknown partition",
    ),
    pytest.param(
        [*V100, "resources.constraint=v100-64g"],
        [
            "resources.constraint=v100-64g",
            "(v100-16g, v100-32g)",
            "HINT: use resources.constraint=v100-16g",
        ],
        id="unknown constraint",
    ),
    pytest.param(
        ["resources.constraint=h100"],
        ["resources.constraint=h100 means nothing on cluster=local"],
        id="constraint on local",
    ),
    pytest.param(
        [*H100, "resources.qos=qos_gpu-t3"],
        [
            "resources.qos=qos_gpu-t3 is not a QoS of jeanzay_h100",
            "qos_gpu_h100-dev <= 02:00:00",
            "HINT: use resources.qos=auto",
        ],
        id="unknown qos",
    ),
    pytest.param(
        [*H100, "resources.qos=qos_gpu_h100-t3", "resources.time=30:00:00"],
        [
            "resources.time=30:00:00 is above the 20:00:00 limit of QoS qos_gpu_h100-t3",
            "HINT: use resources.qos=qos_gpu_h100-t4",
        ],
        id="time above qos",
    ),
    pytest.param(
        [
            *H100,
            "resources.qos=qos_gpu_h100-dev",
            "resources.nodes=9",
            "resources.gpus_per_node=4",
            "train.global_batch_size=288",
        ],
        [
            "resources.qos=qos_gpu_h100-dev allows 32 GPUs per job",
            "= 36",
            "HINT: use at most 32 GPUs",
        ],
        id="gpus above qos",
    ),
    pytest.param(
        [*H100, "resources.time=4-12:00:00"],
        [
            "resources.time=108:00:00 is above the 100:00:00 limit of jeanzay_h100 "
            "partition gpu_p6",
            "HINT: use resources.time=100:00:00 or less",
        ],
        id="time above partition",
    ),
    pytest.param(
        [*A100, "resources.time=30:00:00"],
        ["resources.time=30:00:00 is above the 20:00:00 limit of jeanzay_a100"],
        id="a100 has no long qos",
    ),
    pytest.param(
        [
            *H100,
            "resources.time=30:00:00",
            "resources.nodes=5",
            "resources.gpus_per_node=4",
            "train.global_batch_size=160",
        ],
        [
            "resources.time=30:00:00 with 20 GPUs fits no QoS of jeanzay_h100",
            "HINT: use resources.time=100:00:00 or less, or fewer GPUs",
        ],
        id="auto qos: long job with too many GPUs for t4",
    ),
    pytest.param(
        ["cluster=slurm_local", "resources.time=00:03:00", "preemption.lead_seconds=120"],
        [
            "resources.time=00:03:00 leaves no time to train before the time-limit warning: "
            "Slurm sends preemption.signal=USR1 preemption.lead_seconds=120 s before the end, "
            "and up to 60 s earlier than that",
            "HINT: use resources.time=00:04:00 or more, or a smaller preemption.lead_seconds",
        ],
        id="time limit shorter than the warning lead",
    ),
    pytest.param(
        ["cluster=jeanzay_h100"],
        [
            "cluster.account=null is not set, but jeanzay_h100 charges every job",
            "HINT: use cluster.account=<project>@h100",
        ],
        id="missing account",
    ),
    pytest.param(
        ["cluster=jeanzay_h100", "cluster.account=abc@v100"],
        ["cluster.account=abc@v100 does not end with @h100", "HINT: use cluster.account=abc@h100"],
        id="account of another partition",
    ),
    pytest.param(
        [*V100, "resources.cpus_per_task=12"],
        [
            "resources.cpus_per_task=12 is above the node's share",
            "at most 10",
            "HINT: use resources.cpus_per_task=10",
        ],
        id="cpus above share",
    ),
    pytest.param(
        [
            *H100,
            "parallel.launcher=torchrun",
            "resources.gpus_per_node=4",
            "resources.cpus_per_task=97",
        ],
        [
            "resources.cpus_per_task=97 is above the node's share for 4 GPU(s) per task",
            "at most 96",
        ],
        id="cpus above share, torchrun",
    ),
    pytest.param(
        ["resources.nodes=2"],
        [
            "resources.nodes=2 but cluster=local runs on this machine only",
            "HINT: use a Slurm profile",
        ],
        id="nodes on local",
    ),
    pytest.param(
        ["parallel=pipeline", "resources.gpus_per_node=4", "parallel.pipeline_stages=2"],
        [
            "parallel.pipeline_stages=2 but resources.nodes x resources.gpus_per_node = 4",
            "HINT: use parallel.pipeline_stages=4, or parallel.mode=pipeline_ddp",
        ],
        id="pipeline stages != world",
    ),
    pytest.param(
        [
            *H100,
            "parallel=pipeline_ddp",
            "resources.nodes=2",
            "resources.gpus_per_node=3",
            "parallel.pipeline_stages=4",
            "train.global_batch_size=64",
        ],
        [
            "parallel.pipeline_stages=4 does not divide the world size 6",
            "HINT: use a divisor of the world size, e.g. parallel.pipeline_stages=3",
        ],
        id="stages do not divide world",
    ),
    pytest.param(
        ["parallel=pipeline", "parallel.pipeline_stages=1"],
        ["parallel.pipeline_stages=1 but parallel.mode=pipeline needs at least 2"],
        id="one-stage pipeline",
    ),
    pytest.param(
        [
            "parallel=pipeline",
            "resources.gpus_per_node=4",
            "parallel.pipeline_stages=4",
            "parallel.microbatches=2",
            "train.micro_batch_size=8",
            "train.global_batch_size=8",
        ],
        [
            "parallel.microbatches=2 x 1 accumulation step(s) is below parallel.pipeline_stages=4",
            "HINT: use parallel.microbatches=4",
        ],
        id="1f1b needs microbatches >= stages",
    ),
    pytest.param(
        [
            "parallel=pipeline",
            "resources.gpus_per_node=4",
            "parallel.pipeline_stages=4",
            "parallel.schedule=interleaved_1f1b",
            "parallel.microbatches=9",
            "train.micro_batch_size=9",
            "train.global_batch_size=9",
        ],
        # torch 2.13: rounds = max(1, 9 // 4) = 2, and 9 % 2 != 0
        [
            "parallel.microbatches=9 x 1 accumulation step(s) = 9 micro-batches is not a "
            "multiple of the 2 rounds",
            "HINT: use a multiple of parallel.pipeline_stages, e.g. parallel.microbatches=4",
        ],
        id="interleaved microbatches",
    ),
    pytest.param(
        [
            "parallel=pipeline",
            "resources.gpus_per_node=2",
            "parallel.microbatches=4",
            "train.micro_batch_size=6",
            "train.global_batch_size=24",
        ],
        [
            "train.micro_batch_size=6 is not divisible by parallel.microbatches=4",
            "HINT: use train.micro_batch_size=4",
        ],
        id="micro batch vs microbatches",
    ),
    pytest.param(
        ["resources.gpus_per_node=3", "train.global_batch_size=32"],
        [
            "train.global_batch_size=32 is not divisible by data-parallel size 3 x "
            "train.micro_batch_size=8 (= 24)",
            "HINT: use train.global_batch_size=24",
        ],
        id="global batch",
    ),
    pytest.param(
        [*V100, "train.precision=bf16"],
        [
            "train.precision=bf16 but jeanzay_v100 GPUs have no bfloat16 support",
            "HINT: use train.precision=fp16",
        ],
        id="bf16 on v100",
    ),
    pytest.param(
        ["cluster=slurm_local", "train.precision=fp16"],
        ["train.precision=fp16 but slurm_local trains on the CPU"],
        id="fp16 on cpu",
    ),
    pytest.param(
        ["parallel=dataparallel", "cluster=slurm_local", "resources.nodes=2"],
        ["resources.nodes=2 but parallel.mode=dataparallel runs in one process"],
        id="dataparallel multi-node",
    ),
    pytest.param(
        ["parallel=dataparallel", "parallel.launcher=torchrun"],
        ["parallel.launcher=torchrun but parallel.mode=dataparallel"],
        id="dataparallel with torchrun",
    ),
    pytest.param(["resources.nodes=0"], ["resources.nodes=0 must be at least 1"], id="zero"),
    pytest.param(
        ["resources.gpus_per_node=-2"],
        ["resources.gpus_per_node=-2 must be at least 1"],
        id="negative",
    ),
    pytest.param(
        ["resources.nodes=two"], ["resources.nodes=two is not a whole number"], id="garbage"
    ),
    pytest.param(
        ["resources.nodes=1.5"], ["resources.nodes=1.5 is not a whole number"], id="float"
    ),
    pytest.param(
        ["resources.time=1:60:00"],
        ["resources.time=1:60:00 is not a Slurm time: minutes and seconds must be below 60"],
        id="bad time field",
    ),
    pytest.param(
        ["resources.time=soon"],
        ["resources.time=soon is not a Slurm time: expected HH:MM:SS"],
        id="bad time",
    ),
    pytest.param(
        ["resources.time=0"],
        ["resources.time=0 is not a Slurm time: must be positive"],
        id="zero time",
    ),
    pytest.param(["parallel.mode=tp"], ["parallel.mode=tp is not one of ddp, fsdp"], id="mode"),
    pytest.param(
        ["parallel.schedule=zb"], ["parallel.schedule=zb is not one of gpipe"], id="schedule"
    ),
    pytest.param(
        ["parallel.launcher=mpirun"], ["parallel.launcher=mpirun is not one of srun"], id="launcher"
    ),
    pytest.param(
        ["train.precision=fp8"], ["train.precision=fp8 is not one of auto, bf16"], id="precision"
    ),
    pytest.param(
        ["resources.mem=lots"], ["resources.mem=lots is not a Slurm memory size"], id="mem"
    ),
    pytest.param(
        ["preemption.signal=HUP"], ["preemption.signal=HUP is not one of USR1"], id="signal"
    ),
    pytest.param(
        ["job.name='a/b'"],
        ["job.name=a/b contains a control character or '/'"],
        id="job name with slash",
    ),
    pytest.param(["job.name=''"], ["job.name='' must be a non-empty name"], id="empty name"),
]


@pytest.mark.parametrize(("overrides", "fragments"), RULES)
def test_each_rule_names_key_value_limit_and_fix(
    overrides: list[str], fragments: list[str]
) -> None:
    found = problems(*overrides)
    assert len(found) == 1, found
    for fragment in fragments:
        assert fragment in found[0], found[0]


def test_every_problem_is_reported_at_once() -> None:
    found = problems(
        "cluster=jeanzay_v100",
        "resources.gpus_per_node=8",
        "train.precision=bf16",
        "resources.time=200:00:00",
    )
    keys = sorted(p.split("=")[0] for p in found)
    assert keys == [
        "cluster.account",
        "resources.gpus_per_node",
        "resources.time",
        "train.global_batch_size",
        "train.precision",
    ], found


def test_job_name_with_newline_is_refused() -> None:
    cfg = compose_config([])
    cfg["job"]["name"] = "ok\nrm -rf /"
    with pytest.raises(SpecError, match="control character"):
        build_job_spec(cfg)


def test_typo_in_a_key_is_caught_by_composition() -> None:
    with pytest.raises(ConfigError, match="resources.gpu_per_node"):
        compose_config(["resources.gpu_per_node=4"])


# ---- what a valid request resolves to ------------------------------------------------


@pytest.mark.parametrize(
    ("time", "qos"),
    [
        ("00:30:00", "qos_gpu_h100-dev"),
        ("02:00:00", "qos_gpu_h100-dev"),
        ("02:00:01", "qos_gpu_h100-t3"),
        ("20:00:00", "qos_gpu_h100-t3"),
        ("1-00:00:00", "qos_gpu_h100-t4"),
        ("100:00:00", "qos_gpu_h100-t4"),
    ],
)
def test_qos_auto_picks_the_shortest_that_fits(time: str, qos: str) -> None:
    assert spec(*H100, f"resources.time={time}").qos == qos


def test_qos_auto_skips_a_qos_whose_gpu_limit_is_too_small() -> None:
    # 40 GPUs for 1 h: dev allows 32 per job, so t3.
    s = spec(
        *H100,
        "resources.time=01:00:00",
        "resources.nodes=10",
        "resources.gpus_per_node=4",
        "train.global_batch_size=320",
    )
    assert s.qos == "qos_gpu_h100-t3"


def test_h100_two_nodes_resolves_like_the_idris_examples() -> None:
    s = spec(
        *H100,
        "resources.nodes=2",
        "resources.gpus_per_node=4",
        "resources.time=10:00:00",
        "train.global_batch_size=256",
        "train.micro_batch_size=16",
    )
    assert (s.partition.name, s.constraint, s.qos) == ("gpu_p6", "h100", "qos_gpu_h100-t3")
    assert (s.ntasks_per_node, s.cpus_per_task, s.omp_num_threads) == (4, 24, 24)
    assert (s.layout.world_size, s.layout.dp_size, s.grad_accum_steps) == (8, 8, 2)
    assert s.precision == "bf16"
    assert s.time == "10:00:00"


@pytest.mark.parametrize(
    ("overrides", "cpus"),
    [
        (V100, 10),
        (V100_8, 3),
        (A100, 8),
        (H100, 24),
        ([*H100, "parallel.launcher=torchrun", "resources.gpus_per_node=4"], 96),
    ],
)
def test_cpus_per_task_auto_is_the_gpu_share(overrides: list[str], cpus: int) -> None:
    assert spec(*overrides).cpus_per_task == cpus


def test_torchrun_runs_one_task_per_node_with_threads_shared() -> None:
    s = spec(*H100, "parallel.launcher=torchrun", "resources.gpus_per_node=4")
    assert (s.ntasks_per_node, s.cpus_per_task, s.omp_num_threads) == (1, 96, 24)


@pytest.mark.parametrize(
    ("overrides", "precision"),
    [
        (V100, "fp16"),
        (A100, "bf16"),
        (H100, "bf16"),
        (["cluster=slurm_local"], "fp32"),
        ([], "auto"),
        ([*V100, "train.precision=fp32"], "fp32"),
    ],
)
def test_precision_auto_follows_the_hardware(overrides: list[str], precision: str) -> None:
    assert spec(*overrides).precision == precision


def test_pipeline_accumulation_counts_toward_the_schedule_microbatches() -> None:
    # 2 microbatches x 4 accumulation steps = 8 pipeline micro-batches >= 4 stages.
    s = spec(
        "parallel=pipeline",
        "resources.gpus_per_node=4",
        "parallel.pipeline_stages=4",
        "parallel.microbatches=2",
        "train.micro_batch_size=8",
        "train.global_batch_size=32",
    )
    assert s.grad_accum_steps == 4


def test_local_auto_workers_follow_the_machine() -> None:
    cfg = compose_config([])
    assert build_job_spec(cfg).gpus_per_node == 2  # no GPU: two CPU workers
    assert build_job_spec(cfg, local_gpus=4).gpus_per_node == 4
    assert spec("cluster=slurm_local").gpus_per_node == 1


def test_pipeline_ddp_layout() -> None:
    s = spec(
        "cluster=slurm_local",
        "parallel=pipeline_ddp",
        "resources.nodes=2",
        "resources.gpus_per_node=2",
        "parallel.pipeline_stages=2",
        "train.global_batch_size=32",
    )
    lay = s.layout
    assert (lay.world_size, lay.pp_size, lay.dp_size) == (4, 2, 2)
    assert lay.pipeline_enabled and lay.dp_enabled
    assert s.grad_accum_steps == 2


def test_dataparallel_is_one_task_driving_every_gpu() -> None:
    s = spec(*H100, "parallel=dataparallel", "resources.gpus_per_node=4")
    assert (s.ntasks_per_node, s.layout.world_size, s.layout.dp_size, s.cpus_per_task) == (
        1,
        1,
        1,
        96,
    )


def test_v100_constraint_is_optional_and_checked() -> None:
    assert spec(*V100).constraint is None
    assert spec(*V100, "resources.constraint=v100-32g").constraint == "v100-32g"


def test_generic_profile_passes_unknown_qos_through() -> None:
    assert spec("cluster=generic_slurm", "resources.qos=normal").qos == "normal"
    assert spec("cluster=generic_slurm").qos is None


def test_spec_is_frozen() -> None:
    s = spec()
    with pytest.raises(AttributeError):
        s.nodes = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    "overrides",
    [[], [*H100, "resources.time=10:00:00"], ["cluster=slurm_local"], [*V100, "parallel=fsdp"]],
)
def test_resolved_config_validates_to_the_same_request(overrides: list[str]) -> None:
    first = spec(*overrides)
    again = build_job_spec(first.config, local_gpus=0)
    assert again == first
    assert first.config["resources"]["gpus_per_node"] == first.gpus_per_node
