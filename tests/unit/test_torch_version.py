"""The torch range: what is refused, with both versions named."""

from __future__ import annotations

import pytest

from jeanzay_kit.torch_version import MIN_TORCH, parse_version, torch_too_old


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


@pytest.mark.parametrize("version", ["2.9.0", "2.9.1+cu126", "2.13.0+cpu", "2.14.0"])
def test_supported_versions_pass(version: str) -> None:
    assert torch_too_old(version) is None


@pytest.mark.parametrize("version", ["2.8.0", "2.5.1+cu121", "1.13.1"])
def test_older_versions_are_refused_naming_both(version: str) -> None:
    message = torch_too_old(version, "/site/lib")
    assert message is not None
    assert f"torch {version} is installed (/site/lib)" in message
    assert f"needs torch >= {MIN_TORCH[0]}.{MIN_TORCH[1]}" in message
    assert "HINT:" in message
