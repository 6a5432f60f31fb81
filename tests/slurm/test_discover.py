"""`jzk cluster discover` on the real local cluster: the profile it writes validates,
renders, and a job submitted with it completes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.slurm.cluster import JZK, jzk_submit, run, sacct_states, wait_for

QOS = "jzk_short"


@pytest.fixture
def short_qos(slurm):
    """A QoS with a wall-time and a GPU limit, allowed to this user, as a site has them."""
    made = run(
        ["sacctmgr", "-i", "add", "qos", QOS, "MaxWall=00:20:00", "MaxTRESPerJob=gres/gpu=4"],
        slurm,
    )
    assert made.returncode == 0, made.stdout + made.stderr
    user = run(["id", "-un"], slurm).stdout.strip()
    allowed = run(["sacctmgr", "-i", "modify", "user", user, "set", f"qos+={QOS}"], slurm)
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    yield QOS
    run(["sacctmgr", "-i", "modify", "user", user, "set", f"qos-={QOS}"], slurm)
    run(["sacctmgr", "-i", "delete", "qos", QOS], slurm)


@pytest.mark.slurm
@pytest.mark.timeout(300)
def test_discovered_profile_validates_renders_and_runs(slurm, short_qos, tmp_path: Path) -> None:
    env = dict(slurm, JZK_CONFIG_HOME=str(tmp_path / "config"))
    found = run([JZK, "cluster", "discover"], env, tmp_path)
    assert found.returncode == 0, found.stderr
    path = tmp_path / "config" / "cluster" / "jzklocal.yaml"
    assert f"wrote {path}" in found.stdout
    text = path.read_text()
    profile = yaml.safe_load(text)
    assert set(profile["partitions"]) == {"debug", "high", "low"}
    for part in profile["partitions"].values():
        assert (part["gpus_per_node"], part["cpus_per_node"], part["max_time"]) == (
            4,
            2,
            "01:00:00",
        )
    assert profile["default_partition"] == "debug"
    assert profile["partitions"]["low"]["preemptible"] is True  # high (tier 10) preempts it
    assert profile["partitions"]["high"]["preemptible"] is False
    assert profile["qos"][QOS] == {"max_time": "00:20:00", "max_gpus_per_job": 4}
    assert "normal" in profile["qos"]
    # Every value line says where it came from.
    for line in text.splitlines():
        if re.match(r"\s+(gpus_per_node|cpus_per_node|max_time|preemptible):", line):
            assert "# scontrol show" in line, line
        if line.startswith(f"  {QOS}:"):
            assert "# sacctmgr -n -P show qos" in line

    # jzk finds the profile by name at once; qos=auto picks the short QoS that fits.
    request = [
        "cluster=jzklocal",
        "cluster.device=cpu",  # the local cluster's GPUs are stand-ins
        "resources.nodes=2",
        "resources.gpus_per_node=2",
        "resources.time=00:05:00",
    ]
    checked = run([JZK, "validate", "--slurm", *request], env, tmp_path)
    assert checked.returncode == 0, checked.stderr
    assert f"qos             {QOS}  (auto" in checked.stdout, checked.stdout
    assert "Slurm accepts it" in checked.stdout
    too_long = run(
        [JZK, "validate", *request, f"resources.qos={QOS}", "resources.time=00:30:00"],
        env,
        tmp_path,
    )
    assert too_long.returncode == 2
    assert f"is above the 00:20:00 limit of QoS {QOS}" in too_long.stderr

    job_id, _, log = jzk_submit(env, tmp_path, *request, "job.name=discovered", "train.steps=10")
    wait_for(job_id, slurm, timeout=240)
    assert sacct_states(job_id, slurm) == ["COMPLETED"]
    assert log == tmp_path / "logs" / f"discovered-{job_id}.out"
    assert "done: 10 steps" in log.read_text()
    shown = run(["sacct", "-X", "-n", "-P", "-j", job_id, "-o", "QOS"], slurm).stdout.split()
    assert shown == [QOS]


@pytest.mark.slurm
@pytest.mark.timeout(300)
def test_a_job_on_a_partition_without_gpus_asks_none_and_trains_on_cpu(
    slurm, tmp_path: Path
) -> None:
    """A profile's CPU partition (gpus_per_node: 0, as discover writes prepost or cpu_p1):
    the job asks Slurm for no GPU, runs two CPU processes on its node with gloo, and the
    CPUs of the node are theirs."""
    request = [
        "cluster=slurm_local",
        "cluster.partitions.debug.gpus_per_node=0",  # this site's debug nodes: no GPUs
        "resources.gpus_per_node=2",  # on a CPU partition: processes per node
        "job.name=cpuonly",
        "train.steps=10",
    ]
    job_id, run_dir, log = jzk_submit(slurm, tmp_path, *request)
    script = (run_dir / "job.sbatch").read_text()
    assert "--gres" not in script and "--ntasks-per-node=2" in script
    wait_for(job_id, slurm, timeout=240)
    assert sacct_states(job_id, slurm) == ["COMPLETED"], log.read_text()[-2000:]
    tres = run(["sacct", "-X", "-n", "-P", "-j", job_id, "-o", "AllocTRES"], slurm).stdout
    assert "gres/gpu" not in tres and "cpu=2" in tres, tres
    out = log.read_text()
    assert "done: 10 steps" in out and "rank 0/2" in out
