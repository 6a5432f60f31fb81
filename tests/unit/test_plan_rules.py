"""`jzk plan`'s alternatives (issue 67 point 3; launch/plan_rules.py): which rows a request
gets, what each row costs and ends by, and that an alternative that does not pass
validation is never shown (cli/plan.py)."""

from __future__ import annotations

import argparse

import pytest

from jeanzay_kit.launch.plan_rules import Alternative, Request, alternatives, plan_table, row_of

QOS = [("qos_t3", 1200, 512), ("qos_t4", 6000, 16), ("qos_dev", 120, 32)]


@pytest.mark.parametrize(
    ("req", "labels"),
    [
        (Request(480, 2, 4, "qos_t3", QOS, 6000),
         ["as asked", "2 chained jobs of 04:00:00", "4 chained jobs of 02:00:00",
          "time-min 04:00:00 (backfill may start it sooner, shorter)", "QoS qos_t4",
          "1 node(s), twice the time"]),
        # 40 minutes: no chain of jobs shorter than 30 minutes; one node: no fewer nodes.
        (Request(40, 1, 4, "qos_dev", QOS, 6000), ["as asked", "QoS qos_t3", "QoS qos_t4"]),
        # a script that does not resume: no chain, no fewer nodes (its batch is its own).
        (Request(480, 2, 4, "qos_t3", QOS, 6000, resumes=False, keeps_global_batch=False),
         ["as asked", "QoS qos_t4"]),
        # twice the time passes the longest limit: the fewer-nodes row is chained.
        (Request(1200, 2, 4, "qos_t3", QOS[:1], 1200),
         ["as asked", "2 chained jobs of 10:00:00", "4 chained jobs of 05:00:00",
          "time-min 10:00:00 (backfill may start it sooner, shorter)",
          "1 node(s), twice the time, 2 chained jobs"]),
    ],
)  # fmt: skip
def test_the_rows_a_request_gets(req: Request, labels: list[str]) -> None:
    assert [a.label for a in alternatives(req)] == labels


def test_a_qos_too_small_for_the_request_is_not_offered() -> None:
    # 64 GPUs: qos_t4 allows 16 a job; 3 hours: qos_dev allows 2.
    labels = [a.label for a in alternatives(Request(180, 16, 4, "qos_t3", QOS, 6000))]
    assert not any(label.startswith("QoS") for label in labels)


def test_a_rows_end_and_hours_count_every_job_of_its_chain() -> None:
    alt = Alternative("2 chained jobs of 04:00:00", ("resources.time=04:00:00",), 2)
    row = row_of(1, alt, 240, 8, "2026-11-28T10:00:00")
    assert row.end_estimate == "2026-11-28T18:00:00" and row.gpu_hours == 64.0
    table = plan_table([row, row_of(0, Alternative("as asked", ()), 480, 8, None, "no")])
    assert "resources.time=04:00:00 --chain 2" in table and "refused" in table


def test_an_alternative_that_does_not_validate_is_never_shown() -> None:
    from jeanzay_kit.cli.plan import _row

    args = argparse.Namespace(overrides=["cluster=jeanzay_h100", "cluster.account=abc@h100"],
                              config_dir=None)  # fmt: skip
    assert _row(args, Alternative("QoS nope", ("resources.qos=qos_does_not_exist",)), 3) is None


def test_another_pool_of_the_same_project_replaces_profile_and_account() -> None:
    from jeanzay_kit.launch.plan_rules import other_pools, with_alternative

    profiles = [("jeanzay_h100", "@h100"), ("jeanzay_a100", "@a100"), ("generic", None)]
    pools = other_pools("abc@h100", "@h100", profiles, "jeanzay_h100")
    assert pools == [("jeanzay_a100", "abc@a100")]
    assert other_pools("abc", "@h100", profiles, "jeanzay_h100") == []  # not <project>@<arch>
    alt = Alternative("pool jeanzay_a100", ("cluster=jeanzay_a100", "cluster.account=abc@a100"))
    asked = ["cluster=jeanzay_h100", "cluster.account=abc@h100", "resources.nodes=2"]
    assert with_alternative(asked, alt) == ["resources.nodes=2", *alt.overrides]
    labels = [a.label for a in alternatives(Request(60, 1, 4, None, (), 60, pools=pools))]
    assert "pool jeanzay_a100" in labels


@pytest.mark.parametrize(
    ("time_min", "said"),
    [
        ("00:30:00", None),
        ("02:00:00", "is longer than resources.time"),
        ("soon", "not a Slurm time"),
    ],
)
def test_time_min_is_checked_and_rendered(time_min: str, said: str | None) -> None:
    from jeanzay_kit.errors import SpecError
    from jeanzay_kit.launch.request import spec_of
    from jeanzay_kit.slurm.sbatch import render_sbatch

    asked = ["cluster=jeanzay_h100", "cluster.account=abc@h100", "resources.time=01:00:00",
             f"resources.time_min={time_min}"]  # fmt: skip
    if said is not None:
        with pytest.raises(SpecError, match=said):
            spec_of(asked, None)
        return
    spec = spec_of(asked, None)
    assert spec.resources.time_min == "00:30:00"
    assert "#SBATCH --time-min=00:30:00" in render_sbatch(spec, workdir="/w")
