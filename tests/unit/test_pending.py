"""Why a pending job waits, in words (jeanzay_kit/slurm/pending.py, issue 67 point 1):
squeue's and sprio's rows read back, and each of Slurm's reason codes said with what it
means and what would change it."""

from __future__ import annotations

import pytest

from jeanzay_kit.slurm.pending import (
    Waiting,
    dependency_jobs,
    estimate_errors,
    limit_why,
    parse_pending,
    parse_sprio,
    pending_why,
    trust_line,
)


def test_squeues_pending_rows_are_read_with_their_estimate() -> None:
    # As `squeue -O PENDING_FORMAT` prints them: padded fields, "|" after each.
    text = (
        "41                                                          |Priority"
        "                                                    |2026-11-29T03:10:00           "
        "|2026-11-28T17:50:02           |(null)|\n"
        "42_3|Dependency|N/A|Unknown|afterany:41(unfulfilled)|\n"
        "garbage\n"
    )
    rows = parse_pending(text)
    assert rows["41"] == Waiting("41", "Priority", "2026-11-29T03:10:00", "2026-11-28T17:50:02")
    assert rows["42_3"].start_estimate is None and rows["42_3"].evaluated_at is None
    assert dependency_jobs(rows["42_3"]) == ["41"]
    assert set(rows) == {"41", "42_3"}


def test_sprios_parts_are_read_and_a_refusal_is_nothing() -> None:
    assert parse_sprio("  41|10450|450|9000|1000|0|0\n") == {
        "41": {"priority": 10450, "age": 450, "fairshare": 9000, "jobsize": 1000,
               "partition": 0, "qos": 0}
    }  # fmt: skip
    assert parse_sprio("You are not running a supported priority plugin\n") == {}


@pytest.mark.parametrize(
    ("reason", "said"),
    [
        ("Priority", "jobs of higher priority go first"),
        ("Resources", "the nodes it asks for are busy"),
        ("JobHeldUser", "scontrol release 7"),
        ("JobHeldAdmin", "held by an administrator"),
        ("BeginTime", "--begin"),
        ("ReqNodeNotAvail, Reserved for maintenance", "reservation starts it now"),
        ("None", "not looked at it yet"),
        ("QOSMaxGRESPerUser", "lets one user hold only so many GPUs"),
        ("AssocGrpGRES", "your account (its association) lets all its jobs together"),
        ("QOSMaxNodePerJob", "asks more nodes than its QoS allows one job"),
        ("AssocGrpGRESMinutes", "the allocation of your account is spent"),
        ("AssocGrpCPUMinutes", "the allocation of your account is spent"),
        ("QOSGrpGRESRunMinutes", "caps the GPUs-minutes of the running jobs"),
        ("PartitionTimeLimit", "will not start it as asked"),
        ("SomethingNew", "Slurm says SomethingNew"),
    ],
)
def test_each_reason_is_said_with_what_would_change_it(reason: str, said: str) -> None:
    line = pending_why(Waiting("7", reason, start_estimate=None))
    assert said in line, line
    assert "\n" not in line


def test_the_estimate_and_the_priority_parts_are_in_the_sentence() -> None:
    w = Waiting("7", "Priority", "2026-11-29T03:10:00", priority={"priority": 90, "age": 40})
    line = pending_why(w, partition="gpu_p6")
    assert "in gpu_p6" in line and "its priority 90: age 40" in line
    assert "Slurm's estimate: 2026-11-29T03:10:00" in line


def test_a_dependency_names_its_job_and_its_state() -> None:
    w = Waiting("8", "Dependency", dependency="afterok:41(unfulfilled)")
    assert "after job 41 (afterok, RUNNING)" in pending_why(w, {"41": "RUNNING"})
    never = Waiting("8", "DependencyNeverSatisfied", dependency="afterok:41(failed)")
    line = pending_why(never, {"41": "FAILED"})
    assert "will never start" in line and "jzk cancel 8" in line and "FAILED" in line


@pytest.mark.parametrize("reason", ["Priority", "Resources", "Dependency", "BeginTime"])
def test_not_a_limit_code_is_no_limit(reason: str) -> None:
    assert limit_why(reason) is None


def test_how_far_the_estimates_were_from_the_real_starts() -> None:
    estimates = {"1": "2026-11-28T10:00:00", "2": "2026-11-28T10:00:00", "3": "2026-11-28T10:00:00"}
    starts = {"1": "2026-11-28T10:30:00", "2": "2026-11-28T09:50:00", "3": "Unknown"}
    errors = estimate_errors(estimates, starts)
    assert sorted(errors) == [-600.0, 1800.0]  # job 3 has not started: not counted
    line = trust_line(errors)
    assert line is not None and "your last 2 job(s)" in line
    assert "from 10 min early to 30 min late" in line
    assert trust_line([]) is None
