"""`jzk cluster discover`'s reading of scontrol and sacctmgr output (canned text of a site
with mixed partitions), and the profile it writes loading as a profile."""

from __future__ import annotations

import pytest
import yaml

from jeanzay_kit.config.clusters import profile_from_dict
from jeanzay_kit.slurm.discover import Accounting, discover_profile, gres_gpus, parse_records

CONFIG = """Configuration data as of 2026-11-23T10:00:00
AccountingStorageEnforce = associations,limits,qos
ClusterName             = bigsite
MaxArraySize            = 10001
PreemptType             = preempt/partition_prio
"""
PARTITIONS = (
    "PartitionName=cpu_p1 AllowGroups=ALL AllowQos=qos_cpu-dev,normal Default=YES "
    "MaxTime=4-00:00:00 Nodes=c[1-2] PriorityTier=1 PreemptMode=OFF State=UP\n"
    "PartitionName=gpu_a100 AllowQos=qos_dev,qos_t3,normal Default=NO MaxTime=20:00:00 "
    "Nodes=g[1-3] PriorityTier=1 PreemptMode=REQUEUE State=UP\n"
    "PartitionName=gpu_dev AllowQos=qos_dev,qos_t3,normal Default=NO MaxTime=02:00:00 "
    "Nodes=g1 PriorityTier=10 PreemptMode=OFF State=UP\n"
    "PartitionName=gpu_long AllowQos=qos_dev,qos_t3,normal Default=NO MaxTime=UNLIMITED "
    "Nodes=g[2-3] PriorityTier=1 PreemptMode=OFF State=UP\n"
)


def node(name: str, gres: str, cpus: int, mem: int, feats: str) -> str:
    return (
        f"NodeName={name} Arch=x86_64 CoresPerSocket=32  CPUAlloc=0 CPUTot={cpus} "
        f"AvailableFeatures={feats} ActiveFeatures={feats} Gres={gres} NodeAddr={name} "
        "Version=23.02.7 OS=Linux 5.14.0-362.el9.x86_64 #1 SMP PREEMPT_DYNAMIC Mon Nov 6 2023 "
        f"RealMemory={mem} AllocMem=0 Sockets=2 ThreadsPerCore=2 State=IDLE\n"
    )


NODES = (
    node("c1", "(null)", 80, 190000, "(null)")
    + node("c2", "(null)", 80, 190000, "(null)")
    + node("g1", "gpu:a100:8(S:0-1)", 128, 500000, "a100,sxm4")
    + node("g2", "gpu:a100:8(S:0-1),mps:800", 128, 500000, "a100,sxm4")
    + node("g3", "gpu:a100:4(S:0)", 64, 250000, "a100,pcie")
)
# sacctmgr -n -P: Name|MaxWall|MaxTRESPerJob, and Account|Partition|QOS.
QOS = (
    "normal||\nqos_dev|02:00:00|gres/gpu=32\nqos_t3|20:00:00|cpu=40,gres/gpu=512\n"
    "other|1-00:00:00|\nqos_cpu-dev|01:00:00|\n"
)
ASSOC = "abc||qos_dev,qos_t3,normal,qos_cpu-dev\nxyz||qos_t3\n"


@pytest.mark.parametrize(
    ("gres", "want"),
    [
        ("gpu:4", (4, None)),
        ("gpu:a100:8(S:0-1)", (8, "a100")),
        ("gpu:h100:4(S:0-1),mps:400", (4, "h100")),
        ("(null)", (0, None)),
        ("mps:100", (0, None)),
    ],
)
def test_gres_gpus(gres: str, want: tuple[int, str | None]) -> None:
    assert gres_gpus(gres) == want


def test_records_keep_values_with_spaces() -> None:
    (rec,) = parse_records(node("g1", "gpu:2", 8, 1000, "(null)"))
    assert rec["OS"] == "Linux 5.14.0-362.el9.x86_64 #1 SMP PREEMPT_DYNAMIC Mon Nov 6 2023"
    assert rec["RealMemory"] == "1000" and rec["Gres"] == "gpu:2"


def test_profile_of_a_mixed_site() -> None:
    found = discover_profile(CONFIG, PARTITIONS, NODES, Accounting(QOS, ASSOC))
    data = yaml.safe_load(found.yaml)
    assert data["name"] == "bigsite"
    assert set(data["partitions"]) == {"cpu_p1", "gpu_a100", "gpu_dev", "gpu_long"}
    assert data["partitions"]["cpu_p1"]["gpus_per_node"] == 0
    assert any("cpu_p1" in n and "CPU processes" in n for n in found.notes)
    # The site's default partition has no GPUs: the first GPU partition instead.
    assert data["default_partition"] == "gpu_a100"
    a100 = data["partitions"]["gpu_a100"]
    # Mixed nodes: the smallest (g3: 4 GPUs, 32 cores, 250000 MB), said in a comment.
    assert (a100["gpus_per_node"], a100["cpus_per_node"], a100["mem_per_node"]) == (
        4,
        32,
        "250000M",
    )
    assert "mixed nodes: GPUs 4-8" in found.yaml
    assert a100["constraints"] == ["a100", "pcie", "sxm4"]
    assert a100["preemptible"] is True and data["partitions"]["gpu_dev"]["preemptible"] is False
    assert data["partitions"]["gpu_long"]["max_time"] is None
    assert data["hint"] == "nomultithread"  # ThreadsPerCore=2
    assert data["account_required"] is True  # AccountingStorageEnforce=associations,...
    assert data["account"] is None  # two accounts: the user picks
    assert "abc, xyz" in found.yaml
    assert data["max_array_size"] == 10001
    # Only the QoS the user's associations allow; no MaxWall -> the longest MaxTime.
    # Each QoS with the partitions that allow it (AllowQos); normal: all of them.
    gpus = ["gpu_a100", "gpu_dev", "gpu_long"]
    assert data["qos"] == {
        "normal": {"max_time": "4-00:00:00"},
        "qos_cpu-dev": {"max_time": "01:00:00", "partitions": ["cpu_p1"]},
        "qos_dev": {"max_time": "02:00:00", "max_gpus_per_job": 32, "partitions": gpus},
        "qos_t3": {"max_time": "20:00:00", "max_gpus_per_job": 512, "partitions": gpus},
    }
    assert data["default_qos"] == "normal"
    profile = profile_from_dict(data)
    assert profile.partitions["gpu_a100"].mem_per_node_mb == 250000


def test_without_accounting_the_profile_says_so_and_passes_qos_through() -> None:
    found = discover_profile(
        CONFIG, PARTITIONS, NODES, Accounting(None, None, missing="slurmdbd: no answer")
    )
    data = yaml.safe_load(found.yaml)
    assert data["qos"] == {} and data["default_qos"] is None
    assert "no accounting" in found.yaml
    assert any("no Slurm accounting (slurmdbd: no answer)" in n for n in found.notes)


def test_v100_nodes_give_bf16_false() -> None:
    nodes = NODES.replace("gpu:a100", "gpu:v100")
    assert (
        yaml.safe_load(discover_profile(CONFIG, PARTITIONS, nodes, Accounting(QOS, ASSOC)).yaml)[
            "bf16"
        ]
        is False
    )


def test_a_cluster_without_gpus_gets_a_cpu_profile() -> None:
    found = discover_profile(CONFIG, PARTITIONS.splitlines()[0], NODES, Accounting(QOS, ASSOC))
    data = yaml.safe_load(found.yaml)
    assert data["device"] == "cpu" and data["default_partition"] == "cpu_p1"
    assert data["partitions"]["cpu_p1"]["cpus_per_node"] == 40  # 80 threads, 2 per core


def _discovered_spec(*overrides: str):
    from jeanzay_kit.config.compose import compose_config
    from jeanzay_kit.config.spec import build_job_spec

    data = yaml.safe_load(discover_profile(CONFIG, PARTITIONS, NODES, Accounting(QOS, ASSOC)).yaml)
    data.pop("defaults")
    cfg = compose_config(["cluster=generic_slurm", *overrides])
    cfg["cluster"] = {**cfg["cluster"], **data, "account": "abc"}
    return build_job_spec(cfg)


def test_the_qos_picked_is_one_the_partition_allows_and_cpu_jobs_ask_no_gpu() -> None:
    from jeanzay_kit.slurm.sbatch import render_sbatch

    # A 30-minute script task on the GPU partition: qos_cpu-dev is shorter, but cpu_p1's.
    script = ["job.entry=train.py", "resources.time=00:30:00"]
    gpu = _discovered_spec(*script, "resources.gpus_per_node=4")
    assert gpu.resources.qos == "qos_dev" and gpu.cluster.device == "cuda"
    cpu = _discovered_spec(*script, "resources.partition=cpu_p1", "resources.gpus_per_node=2")
    assert cpu.resources.qos == "qos_cpu-dev" and cpu.cluster.device == "cpu"
    assert cpu.resources.cpus_per_task == 20 and cpu.resources.total_gpus == 0
    text = render_sbatch(cpu)
    assert "--gres" not in text and "--gpus" not in text and "#SBATCH --ntasks-per-node=2" in text
    from jeanzay_kit.errors import SpecError

    with pytest.raises(SpecError, match="partition cpu_p1 \\(AllowQos\\)"):
        _discovered_spec(*script, "resources.partition=cpu_p1", "resources.qos=qos_dev")
