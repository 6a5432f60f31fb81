"""jeanzay_kit/doctor/table.py: pairings, per-rank figures, the slow-rank flag, the table."""

from __future__ import annotations

import pytest

from jeanzay_kit.doctor.table import (
    RankFacts,
    bus_bandwidth,
    cpu_ranges,
    format_rank_table,
    pair_rounds,
    rank_figures,
    slow_ranks,
)


@pytest.mark.parametrize(
    ("cpus", "text"),
    [([], "-"), ([3], "3"), ([0, 1, 2, 3], "0-3"), ([8, 0, 1, 2, 3, 10, 11], "0-3,8,10-11")],
)
def test_cpu_ranges(cpus: list[int], text: str) -> None:
    assert cpu_ranges(cpus) == text


@pytest.mark.parametrize(
    ("world", "rounds"),
    [
        (1, []),
        (2, [[[0, 1]]]),
        (3, [[[0, 1]], [[1, 2]]]),
        (4, [[[0, 1], [2, 3]], [[1, 2], [3, 0]]]),
        (5, [[[0, 1], [2, 3]], [[1, 2], [3, 4]]]),
    ],
)
def test_pair_rounds(world: int, rounds: list) -> None:
    assert pair_rounds(world) == rounds
    for pairs in rounds:  # a rank is in at most one pair per round
        members = [r for pair in pairs for r in pair]
        assert len(members) == len(set(members))
    # every rank is measured at least once
    assert {r for pairs in rounds for pair in pairs for r in pair} == (
        set(range(world)) if world > 1 else set()
    )


def measure(world: int, speed: dict[int, float]) -> list[dict[int, float]]:
    """What the pair rounds would measure if a pair runs at its slower member's speed."""
    out = []
    for pairs in pair_rounds(world):
        figures = {}
        for a, b in pairs:
            figures[a] = figures[b] = min(speed.get(a, 10.0), speed.get(b, 10.0))
        out.append(figures)
    return out


@pytest.mark.parametrize(("world", "slow"), [(4, 2), (8, 0), (8, 7), (5, 4), (6, 3)])
def test_only_the_slow_rank_keeps_a_low_figure(world: int, slow: int) -> None:
    figures = rank_figures(world, measure(world, {slow: 2.0}))
    assert slow_ranks(figures) == [slow]
    assert figures[slow] == 2.0


def test_no_flag_for_even_ranks_or_too_few_figures() -> None:
    assert slow_ranks([5.0, 5.1, 4.9, 5.0]) == []
    assert slow_ranks([5.0, None]) == []
    assert slow_ranks([10.0, 10.0, 6.9]) == [2]  # under 0.7 x median 10
    assert slow_ranks([10.0, 10.0, 7.0]) == []


def test_bus_bandwidth_follows_nccl_tests() -> None:
    # 1 GB in 1 s over 8 ranks: algbw 1 GB/s, busbw x 2*7/8.
    assert bus_bandwidth(10**9, 1.0, 8) == pytest.approx(1.75e9)
    assert bus_bandwidth(10**9, 1.0, 2) == pytest.approx(1e9)
    assert bus_bandwidth(10**9, 1.0, 1) == 0.0


def test_table_has_one_row_per_rank_in_rank_order() -> None:
    facts = [
        RankFacts(r, r % 2, r // 2, f"n{r // 2}", 100 + r, "0,1", "cpu", (r,), "n0:29500")
        for r in (3, 1, 0, 2)
    ]
    lines = format_rank_table(facts, [4e9, 4e9, 1e9, 4e9], [2]).splitlines()
    assert lines[0].split()[:3] == ["RANK", "HOST", "LOCAL"]
    assert [line.split()[0] for line in lines[1:]] == ["0", "1", "2", "3"]
    assert lines[3].split()[-2:] == ["1.00", "SLOW"]
    assert lines[1].split()[-1] == "4.00"
