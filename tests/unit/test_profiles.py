"""The cluster profiles hold the documented facts (sources in docs/clusters.md)."""

from __future__ import annotations

import pytest

from jeanzay_kit.config.clusters import ClusterProfile, profile_from_dict
from jeanzay_kit.config.compose import compose_config
from jeanzay_kit.errors import SpecError
from jeanzay_kit.slurm_syntax.timefmt import parse_time


def profile(name: str) -> ClusterProfile:
    return profile_from_dict(compose_config([f"cluster={name}"])["cluster"])


# name, default partition, GPUs/node, CPUs/GPU, partition max, select, bf16, account suffix, modules
FACTS = [
    ("jeanzay_v100", "gpu_p13", 4, 10, "100:00:00", "partition", False, "@v100", ()),
    ("jeanzay_v100_8gpu", "gpu_p2", 8, 3, "100:00:00", "partition", False, "@v100", ()),
    ("jeanzay_a100", "gpu_p5", 8, 8, "20:00:00", "constraint", True, "@a100", ("arch/a100",)),
    ("jeanzay_h100", "gpu_p6", 4, 24, "100:00:00", "constraint", True, "@h100", ("arch/h100",)),
]


@pytest.mark.parametrize(
    ("name", "part", "gpus", "cpus_per_gpu", "max_time", "select", "bf16", "suffix", "modules"),
    FACTS,
)
def test_jean_zay_facts(
    name, part, gpus, cpus_per_gpu, max_time, select, bf16, suffix, modules
) -> None:
    p = profile(name)
    partition = p.partitions[p.default_partition]
    assert p.default_partition == part
    assert partition.gpus_per_node == gpus
    assert partition.cpus_per_gpu == cpus_per_gpu
    assert partition.max_minutes == parse_time(max_time)
    assert partition.select == select
    assert p.bf16 is bf16
    assert p.account_required and p.account_suffix == suffix
    assert p.modules == modules
    assert p.hint == "nomultithread"
    assert p.module_purge


@pytest.mark.parametrize(
    ("name", "qos"),
    [
        (
            "jeanzay_v100",
            {
                "qos_gpu-dev": ("02:00:00", 32),
                "qos_gpu-t3": ("20:00:00", 512),
                "qos_gpu-t4": ("100:00:00", 16),
            },
        ),
        (
            "jeanzay_a100",
            {"qos_gpu_a100-dev": ("02:00:00", 32), "qos_gpu_a100-t3": ("20:00:00", 512)},
        ),
        (
            "jeanzay_h100",
            {
                "qos_gpu_h100-dev": ("02:00:00", 32),
                "qos_gpu_h100-t3": ("20:00:00", 512),
                "qos_gpu_h100-t4": ("100:00:00", 16),
            },
        ),
    ],
)
def test_jean_zay_qos(name: str, qos: dict[str, tuple[str, int]]) -> None:
    p = profile(name)
    assert {q.name: (q.max_minutes, q.max_gpus_per_job) for q in p.qos.values()} == {
        k: (parse_time(t), g) for k, (t, g) in qos.items()
    }
    assert p.default_qos and p.default_qos.endswith("-t3")


def test_v100_constraints_select_16_or_32_gb() -> None:
    assert profile("jeanzay_v100").partitions["gpu_p13"].constraints == ("v100-16g", "v100-32g")


def test_slurm_local_matches_the_test_cluster() -> None:
    p = profile("slurm_local")
    assert p.default_partition == "debug"
    assert set(p.partitions) == {"debug", "high", "low"}
    assert [n for n, part in p.partitions.items() if part.preemptible] == ["low"]
    assert all(
        part.gpus_per_node == 4 and part.cpus_per_node == 2 for part in p.partitions.values()
    )
    assert p.device == "cpu" and not p.account_required


def test_local_is_the_default_and_has_no_scheduler() -> None:
    cfg = compose_config([])
    assert cfg["cluster"]["name"] == "local"
    assert profile("local").scheduler == "local"


BASE = {"name": "site", "partitions": {"gpu": {"gpus_per_node": 4, "max_time": "20:00:00"}}}


@pytest.mark.parametrize(
    ("change", "key", "says"),
    [
        ({"partitions": {"gpu": {"gpus_per_node": "4"}}}, "partitions.gpu.gpus_per_node", "whole"),
        ({"partitions": {"gpu": {"preemptible": "yes"}}}, "partitions.gpu.preemptible", "true or"),
        ({"partitions": {"gpu": {"constraints": "h100"}}}, "partitions.gpu.constraints", "a list"),
        ({"partitions": {"gpu": {"select": ["partition"]}}}, "partitions.gpu.select", "a string"),
        (
            {"qos": {"qos_gpu-t3": {"max_time": "20:00:00", "max_gpus_per_job": 4.5}}},
            "qos.qos_gpu-t3.max_gpus_per_job",
            "whole",
        ),  # fmt: skip
        ({"qos": ["qos_gpu-t3"]}, "cluster.qos", "a mapping of names"),
        ({"bf16": "false"}, "cluster.bf16", "true or false"),
        ({"modules": "arch/h100"}, "cluster.modules", "a list"),
    ],
)
def test_a_profile_value_of_the_wrong_type_is_refused_naming_its_key(
    change: dict, key: str, says: str
) -> None:
    """Partitions, QoS and most profile keys are untyped in the schema (they vary per
    site): a wrong type is refused where the profile is read, not met later by a rule."""
    data = {**BASE, **change}
    if "partitions" in change:
        data["partitions"] = {"gpu": {**BASE["partitions"]["gpu"], **change["partitions"]["gpu"]}}
    with pytest.raises(SpecError) as refused:
        profile_from_dict(data)
    assert key in str(refused.value) and says in str(refused.value), str(refused.value)


def test_a_numeric_account_is_taken_as_written_and_an_empty_one_is_none() -> None:
    assert profile_from_dict({**BASE, "account": 12345}).account == "12345"
    assert profile_from_dict({**BASE, "account": ""}).account is None
