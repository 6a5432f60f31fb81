"""The torch range: what is refused, with both versions named."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import tomllib

from jeanzay_kit.torch_version import (
    MAX_TORCH,
    MIN_TORCH,
    TESTED_TORCH,
    parse_version,
    supported_range,
    torch_range_line,
    torch_too_new,
    torch_too_old,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("2.9.1", (2, 9, 1)),
        ("2.10.0+cu128", (2, 10, 0)),
        ("2.11.0a0+git1234", (2, 11, 0)),
        ("2.9", (2, 9)),
    ],
)
def test_parse_version(text: str, want: tuple[int, ...]) -> None:
    assert parse_version(text) == want


@pytest.mark.parametrize("version", ["2.9.0", "2.9.1+cu126", "2.13.0+cpu", "2.14.0", "3.0.0"])
def test_supported_versions_pass(version: str) -> None:
    assert torch_too_old(version) is None


@pytest.mark.parametrize("version", ["2.8.0", "2.5.1+cu121", "1.13.1"])
def test_older_versions_are_refused_naming_both(version: str) -> None:
    message = torch_too_old(version, "/site/lib")
    assert message is not None
    assert f"torch {version} is installed (/site/lib)" in message
    assert f"needs torch >= {MIN_TORCH[0]}.{MIN_TORCH[1]}" in message
    assert "HINT:" in message


def test_the_constants_are_pyproject_s_range_and_constraints_pin() -> None:
    # One range: pyproject.toml's requirement, which pip reads, and the constants the
    # toolkit checks at start must not drift apart.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    [requirement] = [d for d in project["dependencies"] if re.match(r"torch\s*[<>=~!]", d)]
    assert requirement.replace(" ", "") == supported_range()
    found = re.fullmatch(r"torch>=(\d+)\.(\d+),<(\d+)\.(\d+)", supported_range())
    assert found is not None
    assert (int(found[1]), int(found[2])) == MIN_TORCH
    assert (int(found[3]), int(found[4])) == MAX_TORCH
    pins = (ROOT / "constraints.txt").read_text().splitlines()
    assert f"torch=={TESTED_TORCH}" in pins
    assert MIN_TORCH <= parse_version(TESTED_TORCH)[:2] < MAX_TORCH


@pytest.mark.parametrize(
    ("version", "warned"),
    [
        ("2.9.0", False),
        ("2.13.0+cpu", False),
        ("2.13.9", False),
        ("2.14.0", True),
        ("2.14.1+cu130", True),
        ("2.15.0.dev20260101", True),
        ("3.0.0", True),
        ("2.8.0", False),  # older: torch_too_old refuses it
    ],
)
def test_a_newer_torch_is_one_warning_line(version: str, warned: bool) -> None:
    message = torch_too_new(version)
    assert (message is not None) == warned
    if message is not None:
        assert "\n" not in message
        assert f"torch {version} is installed, outside the range" in message
        assert f"{supported_range()}; tested {TESTED_TORCH}" in message
        assert "HINT: `jzk doctor` says how to go back" in message


@pytest.mark.parametrize(
    ("version", "said", "hint"),
    [
        ("2.9.0", "within", False),
        ("2.13.0+cpu", "within", False),
        ("2.14.0", "newer than", True),
        ("2.15.2+cu130", "newer than", True),
        ("2.8.0", "older than", True),
    ],
)
def test_the_doctor_s_line_says_where_torch_is_and_how_to_go_back(
    version: str, said: str, hint: bool
) -> None:
    line = torch_range_line(version)
    assert line.startswith(f"torch {version}: {said} the range jeanzay_kit was tested with")
    assert ("HINT:" in line) == hint
    assert (f"pip install -c constraints.txt 'torch=={TESTED_TORCH}'" in line) == hint
