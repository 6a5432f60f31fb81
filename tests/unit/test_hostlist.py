"""Hostlist expansion and compression: a table of Slurm's forms, then scontrol itself."""

from __future__ import annotations

import random
import subprocess

import pytest

from jeanzay_kit.errors import HostlistError
from jeanzay_kit.slurm.hostlist import MAX_HOSTS, compress_hostlist, expand_hostlist

EXPAND_CASES = [
    ("n1", ["n1"]),
    ("n[1-3]", ["n1", "n2", "n3"]),
    ("n[01-03,7]", ["n01", "n02", "n03", "n7"]),
    ("n[0010-0012]", ["n0010", "n0011", "n0012"]),
    ("a[9-11]", ["a9", "a10", "a11"]),
    ("n[8-010]", ["n8", "n9", "n10"]),  # width comes from LO
    ("r7i[0-1]n[3-4]", ["r7i0n3", "r7i0n4", "r7i1n3", "r7i1n4"]),
    ("n[1-2][3-4]", ["n13", "n14", "n23", "n24"]),
    ("a[1-2]-[3-4]", ["a1-3", "a1-4", "a2-3", "a2-4"]),
    ("jean-zay-iam[01-03]", ["jean-zay-iam01", "jean-zay-iam02", "jean-zay-iam03"]),
    ("x-1.y,n[1-2]", ["x-1.y", "n1", "n2"]),
    ("n[3,1,2]", ["n3", "n1", "n2"]),  # order kept
    ("a1,a1,a2", ["a1", "a1", "a2"]),  # duplicates kept
    ("n1 n2\tn3", ["n1", "n2", "n3"]),  # whitespace separates, like commas
    ("n1,,n2", ["n1", "n2"]),
    ("", []),
    ("[1-2]", ["1", "2"]),
    ("n[1-2].ib0", ["n1.ib0", "n2.ib0"]),  # a suffix: Slurm 22.05 refuses, we accept
]


@pytest.mark.parametrize(("expr", "hosts"), EXPAND_CASES)
def test_expand_table(expr: str, hosts: list[str]) -> None:
    assert expand_hostlist(expr) == hosts


BAD_EXPRESSIONS = [
    ("n[1-2", "unclosed"),
    ("n1-2]", "without"),
    ("n[[1-2]]", "nested"),
    ("n[]", "empty brackets"),
    ("n[a-b]", "bad range"),
    ("n[5-3]", "backwards"),
    ("n[1-]", "bad range"),
    ("n[0-99999999]", "more than"),
    ("n[0-999][0-9999]", "more than"),
]


@pytest.mark.parametrize(("expr", "why"), BAD_EXPRESSIONS)
def test_expand_rejects_bad_input_clearly(expr: str, why: str) -> None:
    with pytest.raises(HostlistError, match=why) as info:
        expand_hostlist(expr)
    assert expr in str(info.value)  # the message quotes what was given


def test_expand_rejects_non_strings() -> None:
    with pytest.raises(HostlistError):
        expand_hostlist(["n1"])  # type: ignore[arg-type]


COMPRESS_CASES = [
    (["n1", "n2", "n3"], "n[1-3]"),
    (["n3", "n1", "n2"], "n[3,1-2]"),  # scontrol show hostlist keeps the order
    (["n01", "n02", "n3"], "n[01-02,3]"),
    (["r7i0n3", "r7i0n4", "r7i1n3"], "r7i0n[3-4],r7i1n3"),
    (["n9", "n10", "n11"], "n[9-11]"),
    (["n08", "n09", "n10"], "n[08-10]"),
    (["n8", "n09"], "n[8,09]"),
    (["x-1.y", "x-2.y"], "x-1.y,x-2.y"),
    (["foo", "bar"], "foo,bar"),
    (["n1", "foo", "n2"], "n1,foo,n2"),
    (["a1", "a1", "a2"], "a[1,1-2]"),
    (["gpu"], "gpu"),
    ([], ""),
]


@pytest.mark.parametrize(("hosts", "expr"), COMPRESS_CASES)
def test_compress_table(hosts: list[str], expr: str) -> None:
    assert compress_hostlist(hosts) == expr
    assert expand_hostlist(expr) == hosts


@pytest.mark.parametrize("bad", ["", "n 1", "n,1", "n[1]", "a\nb"])
def test_compress_rejects_names_that_are_not_hosts(bad: str) -> None:
    with pytest.raises(HostlistError, match="not a host name"):
        compress_hostlist(["n1", bad])


def test_max_hosts_is_large_enough_for_a_whole_machine() -> None:
    assert len(expand_hostlist("n[0-99999]")) == 100_000 < MAX_HOSTS


# ---- against the real thing ------------------------------------------------------------


def _random_hosts(rng: random.Random) -> list[str]:
    hosts = []
    for _ in range(rng.randint(1, 12)):
        prefix = rng.choice(["n", "gpu-", "r7i1n", "a.b", "jean-zay-iam"])
        width = rng.choice([0, 0, 2, 3])
        number = rng.choice([rng.randint(0, 12), rng.randint(95, 102)])
        hosts.append(prefix + (f"{number:0{width}d}" if width else str(number)))
    if rng.random() < 0.5:
        hosts.sort()
    return hosts


def _random_expression(rng: random.Random) -> str:
    """Hostlists in the forms Slurm prints: bracket groups, with text only between them."""
    items = []
    for _ in range(rng.randint(1, 4)):
        name = rng.choice(["n", "gpu-", "r7i", "a.b-", "jean-zay-iam"])
        groups = rng.randint(0, 2)
        if groups == 0:
            name += str(rng.randint(0, 120))
        for g in range(groups):
            pieces = []
            for _ in range(rng.randint(1, 3)):
                lo = rng.randint(0, 20)
                width = rng.choice([1, 2, 3])
                if rng.random() < 0.5:
                    pieces.append(f"{lo:0{width}d}")
                else:
                    pieces.append(f"{lo:0{width}d}-{lo + rng.randint(0, 4):0{width}d}")
            name += "[" + ",".join(pieces) + "]"
            if g < groups - 1:
                name += rng.choice(["", "n", "-"])
        items.append(name)
    return ",".join(items)


def _scontrol(env: dict[str, str], *args: str) -> str:
    return subprocess.run(
        ["scontrol", "show", *args],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout


@pytest.mark.slurm
def test_compress_matches_scontrol_show_hostlist(scontrol_env: dict[str, str]) -> None:
    rng = random.Random(20261121)
    for _ in range(150):
        hosts = _random_hosts(rng)
        expected = _scontrol(scontrol_env, "hostlist", ",".join(hosts)).strip()
        assert compress_hostlist(hosts) == expected, hosts


@pytest.mark.slurm
def test_expand_matches_scontrol_show_hostnames(scontrol_env: dict[str, str]) -> None:
    rng = random.Random(7)
    checked = 0
    for _ in range(150):
        expr = _random_expression(rng)
        expected = _scontrol(scontrol_env, "hostnames", expr).split()
        assert "Invalid" not in expected, f"the generator made a form Slurm refuses: {expr}"
        assert expand_hostlist(expr) == expected, expr
        checked += 1
    assert checked == 150


@pytest.mark.slurm
@pytest.mark.parametrize(
    ("expr", "hosts"), [c for c in EXPAND_CASES if ".ib0" not in c[0] and c[0]]
)
def test_expand_table_agrees_with_scontrol(
    scontrol_env: dict[str, str], expr: str, hosts: list[str]
) -> None:
    assert _scontrol(scontrol_env, "hostnames", expr).split() == hosts
