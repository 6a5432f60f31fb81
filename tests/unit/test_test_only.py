"""Slurm's answers to `sbatch --test-only`, read into a start estimate or the key to change."""

from __future__ import annotations

import pytest

from jeanzay_kit.slurm.test_only import read_test_only


def test_an_accepted_request_gives_its_estimated_start() -> None:
    answer = read_test_only(
        0,
        "sbatch: Job 1234 to start at 2026-11-23T10:00:05 using 4 processors on nodes "
        "n[1-2] in partition debug\n",
    )
    assert answer.accepted
    assert (answer.start, answer.nodes, answer.partition) == (
        "2026-11-23T10:00:05",
        "n[1-2]",
        "debug",
    )
    assert answer.hint is None


@pytest.mark.parametrize(
    ("stderr", "key"),
    [
        # Messages of Slurm's error table (src/common/slurm_errno.c), as sbatch prints them.
        (
            "Batch job submission failed: Invalid account or account/partition combination "
            "specified",
            "cluster.account",
        ),
        ("Batch job submission failed: Invalid partition name specified", "resources.partition"),
        ("invalid partition specified: gpu", "resources.partition"),  # Slurm 22.05
        ("Batch job submission failed: Invalid qos specification", "resources.qos"),
        (
            "Batch job submission failed: Requested time limit is invalid (missing or exceeds "
            "some limit)",
            "resources.time",
        ),
        (
            "Batch job submission failed: Job violates accounting/QOS policy (job submit "
            "limit, user's size and/or time limits)",
            "resources.qos",
        ),
        (
            "Batch job submission failed: Invalid generic resource (gres) specification",
            "resources.gpus_per_node",
        ),
        ("Batch job submission failed: Invalid feature specification", "resources.constraint"),
        ("Batch job submission failed: Node count specification invalid", "resources.nodes"),
        (
            "Batch job submission failed: Requested node configuration is not available",
            "resources.gpus_per_node",
        ),
    ],
)
def test_a_refusal_names_the_key_to_change(stderr: str, key: str) -> None:
    answer = read_test_only(1, f"sbatch: error: {stderr}\n")
    assert not answer.accepted
    assert answer.message == stderr
    assert answer.hint is not None and answer.hint.startswith(key), answer.hint


def test_an_unknown_refusal_keeps_slurm_s_words() -> None:
    answer = read_test_only(1, "sbatch: error: Something new in Slurm 25.11\n")
    assert not answer.accepted and answer.hint is None
    assert answer.message == "Something new in Slurm 25.11"
