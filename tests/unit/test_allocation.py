"""The account's allocation (issue 67 point 4; launch/allocation_rules.py): used, left, the
burn rate and the day the hours run out, from sacct's rows; the request's share of what is
left, and the refusal past it; cluster.allocation's keys checked with one line each."""

from __future__ import annotations

from datetime import date

import pytest

from jeanzay_kit.errors import SpecError
from jeanzay_kit.launch.allocation import charged_gpus, request_hours
from jeanzay_kit.launch.allocation_rules import (
    NodeShape,
    gpu_hours_by_day,
    over_allocation,
    request_line,
    standing,
    standing_lines,
    tres_charged_gpus,
)
from jeanzay_kit.launch.allocation_rules import (
    charged_gpus as rule_charged_gpus,
)
from jeanzay_kit.launch.request import spec_of

TODAY = date(2026, 11, 28)
# JobID|ElapsedRaw|AllocTRES|End: two attempts of one job, an older job, a running one.
SACCT = (
    "10|3600|cpu=8,gres/gpu=4,node=1|2026-11-27T10:00:00\n"
    "10|1800|cpu=8,gres/gpu=4,node=1|2026-11-28T09:00:00\n"
    "11|36000|cpu=8,gres/gpu=8,node=2|2026-10-01T10:00:00\n"
    "12|7200|cpu=2,gres/gpu=1,node=1|Unknown\n"
    "garbage line\n"
)


def test_used_left_burn_and_the_day_the_hours_run_out() -> None:
    by_day = gpu_hours_by_day(SACCT)
    assert by_day[date(2026, 11, 27)] == 4.0 and by_day[date(2026, 11, 28)] == 2.0
    assert by_day[date(2026, 10, 1)] == 80.0 and by_day[date.max] == 2.0  # running
    s = standing(100.0, by_day, TODAY, blocked_at=1.25)
    assert s.used == 88.0 and s.left == 12.0
    assert s.burn_per_day == pytest.approx((4 + 2 + 2) / 7)  # the October job is old
    assert s.runs_out(TODAY) == date(2026, 12, 8)  # 12 / (8/7) = 10.5 days
    lines = "\n".join(standing_lines(s, TODAY, "abc@h100"))
    assert "used      88.0 (88 %)" in lines and "left      12.0" in lines
    assert "runs out  2026-12-08" in lines and "at 125.0 GPU hours (125 %" in lines


def test_a_request_past_what_is_left_is_refused_with_the_way_out() -> None:
    s = standing(100.0, gpu_hours_by_day(SACCT), TODAY)
    assert "takes at most 6.0 GPU hours of the 12.0 left (50 %)" in request_line(6.0, s)
    assert over_allocation(12.0, s) is None
    refusal = over_allocation(16.0, s)
    assert refusal is not None and "cluster.allocation.go_over=true" in refusal
    assert "16.0 GPU hours and 12.0 of the 100.0 granted are left" in refusal


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("cluster.allocation.hours=-3", "cluster.allocation.hours"),
        ("cluster.allocation.blocked_at=0.5", "cluster.allocation.blocked_at"),
        ("cluster.allocation.since=yesterday", "cluster.allocation.since"),
        ("+cluster.allocation.budget=3", "cluster.allocation.budget"),
    ],
)
def test_each_allocation_key_is_checked_in_one_line(override: str, key: str) -> None:
    with pytest.raises(SpecError) as err:
        spec_of(["cluster=jeanzay_h100", "cluster.account=abc@h100", override], None)
    assert key in str(err.value) and "\n" not in str(err.value)


def test_the_jean_zay_profiles_declare_the_blocking_ratio() -> None:
    spec = spec_of(["cluster=jeanzay_h100", "cluster.account=abc@h100"], None)
    assert spec.cluster.allocation_hours is None and spec.cluster.allocation_blocked_at == 1.25


def test_a_slow_burn_never_runs_out() -> None:
    s = standing(1e6, {TODAY: 0.001}, TODAY)
    assert s.runs_out(TODAY) is None
    assert "never at this rate" in "\n".join(standing_lines(s, TODAY, "abc"))


H100 = NodeShape(gpus=4, cpus=96)  # 24 CPUs per GPU


@pytest.mark.parametrize(
    ("nodes", "gpus", "cpus", "node", "exclusive", "charged"),
    [
        (1, 1, 24, H100, False, 1),  # the GPU's share of CPUs: the GPU
        (1, 1, 48, H100, False, 2),  # half the node's CPUs: half its GPUs
        (1, 1, 25, H100, False, 2),  # one CPU past the share: a second GPU's share
        (1, 1, 200, H100, False, 4),  # never more than the node's GPUs
        (2, 4, 96, H100, False, 8),
        (1, 1, 24, H100, True, 4),  # exclusive: the whole node
        (3, 2, 48, H100, True, 12),
        (2, 2, 500, NodeShape(None, None), False, 4),  # shape unknown: the GPUs asked
    ],
)
def test_a_request_is_charged_as_idris_counts_it(
    nodes: int, gpus: int, cpus: int, node: NodeShape, exclusive: bool, charged: int
) -> None:
    assert rule_charged_gpus(nodes, gpus, cpus, node, exclusive) == charged


@pytest.mark.parametrize(
    ("tres", "charged"),
    [
        ("cpu=24,gres/gpu=1,node=1", 1),
        ("cpu=48,gres/gpu=1,node=1", 2),  # a job submitted with more CPUs than its share
        ("cpu=96,gres/gpu:h100=1,node=1", 4),
        ("cpu=192,gres/gpu=8,node=2", 8),
        ("cpu=8,node=1", 0),  # a CPU job: no GPU hours
        ("billing=4,gres/gpu=2", 2),  # no CPU count: the GPUs allocated
    ],
)
def test_an_attempt_is_charged_by_its_cpus_share_too(tres: str, charged: int) -> None:
    assert tres_charged_gpus(tres, H100) == charged
    day = {date(2026, 11, 27): float(charged)}
    assert gpu_hours_by_day(f"7|3600|{tres}|2026-11-27T10:00:00", H100) == day


def test_an_exclusive_request_is_priced_at_its_nodes_gpus() -> None:
    base = ["cluster=jeanzay_h100", "cluster.account=abc@h100", "resources.gpus_per_node=1"]
    shared = spec_of([*base, "resources.time=02:00:00"], None)
    assert charged_gpus(shared) == 1 and request_hours(shared, jobs=3) == 6.0
    whole = spec_of([*base, "resources.time=02:00:00", "job.sbatch_args=[--exclusive]"], None)
    assert charged_gpus(whole) == 4 and request_hours(whole) == 8.0
