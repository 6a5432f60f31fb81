"""Read Slurm's answer to `sbatch --test-only` and say which key to change. Pure.

sbatch prints either the estimated start ("sbatch: Job 12 to start at 2026-11-23T10:00:00
using 4 processors on nodes n1 in partition debug") or "sbatch: error: ..." with one of the
messages of Slurm's error table (slurm_errno.c). The messages below are the ones a
request built from our keys can meet; each points at the keys that produce the flag.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_START = re.compile(
    r"Job (?P<job>\d+) to start at (?P<start>\S+) using (?P<cpus>\d+) processors on "
    r"nodes (?P<nodes>\S+) in partition (?P<partition>\S+)"
)

# (fragment of Slurm's message, lower case) -> what to change
_HINTS: tuple[tuple[str, str], ...] = (
    (
        "invalid account",
        "cluster.account (--account): use one of your accounts (`sacctmgr show assoc "
        "user=$USER format=account,partition,qos`), and a partition it may use",
    ),
    (
        "invalid partition",
        "resources.partition (--partition): use a partition `sinfo -s` lists, or fix the "
        "profile's partitions (`jzk cluster discover` writes them from the live cluster)",
    ),
    (
        "invalid qos",
        "resources.qos (--qos): use a QoS your account may use (`sacctmgr show assoc "
        "user=$USER format=account,qos`), or resources.qos=auto",
    ),
    (
        "qos policy",
        "resources.qos, resources.time or resources.nodes x resources.gpus_per_node: the "
        "request is above a QoS or association limit (`sacctmgr show qos`)",
    ),
    (
        "time limit",
        "resources.time (--time): use at most the partition's MaxTime (`sinfo -o '%P %l'`) "
        "and the QoS's MaxWall",
    ),
    (
        "invalid generic resource",
        "resources.gpus_per_node (--gres=gpu:N or --gpus-per-node): the nodes have fewer "
        "GPUs, or the profile's cluster.gpu_request does not match the site",
    ),
    (
        "invalid feature",
        "resources.constraint (--constraint): use a feature `sinfo -o '%P %f'` lists",
    ),
    (
        "node count",
        "resources.nodes (--nodes): the partition has fewer nodes (`sinfo -s`)",
    ),
    (
        "node configuration is not available",
        "resources.gpus_per_node, resources.cpus_per_task or resources.mem: no node of the "
        "partition has that many (`sinfo -o '%P %c %m %G'`)",
    ),
    (
        "more processors requested than permitted",
        "resources.cpus_per_task x tasks per node: more CPUs than a node has",
    ),
)


@dataclass(frozen=True)
class TestOnlyAnswer:
    accepted: bool
    message: str  # Slurm's own words, one line
    start: str | None = None
    nodes: str | None = None
    partition: str | None = None
    hint: str | None = None  # the key to change, when refused


def read_test_only(returncode: int, stderr: str) -> TestOnlyAnswer:
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    for line in lines:
        found = _START.search(line)
        if found:
            return TestOnlyAnswer(
                accepted=True,
                message=line.removeprefix("sbatch: "),
                start=found["start"],
                nodes=found["nodes"],
                partition=found["partition"],
            )
    errors = [ln for ln in lines if "error" in ln.lower()] or lines or ["(no answer)"]
    message = " ".join(e.removeprefix("sbatch: ").removeprefix("error: ") for e in errors)
    low = message.lower()
    hint = next((h for frag, h in _HINTS if frag in low), None)
    return TestOnlyAnswer(accepted=returncode == 0, message=message, hint=hint)
