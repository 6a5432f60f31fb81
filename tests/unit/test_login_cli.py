"""The command line on a login node (issue 43 point 6): a mistyped section is refused in
the user's words, and `jzk cluster list` is `jzk clusters`."""

from __future__ import annotations

import pytest

from jeanzay_kit.cli import main
from jeanzay_kit.config.compose import check_sections
from jeanzay_kit.errors import ConfigError

GROUPS = {"cluster", "model", "data", "optim", "parallel", "loss"}


@pytest.mark.parametrize(
    ("override", "said"),
    [
        ("resource.nodes=3", "did you mean resources.nodes=3?"),
        ("trian.steps=5", "did you mean train.steps=5?"),
        ("~chekpoint.every_steps", None),  # no value: Hydra's own deletion syntax
    ],
)
def test_a_key_in_no_section_names_the_section_meant(override: str, said: str | None) -> None:
    if said is None:
        check_sections([override], GROUPS)
        return
    with pytest.raises(ConfigError) as err:
        check_sections([override], GROUPS)
    text = str(err.value)
    assert f"{override}: '{override.split('.')[0]}' is no section of the config" in text
    assert said in text and "resources" in text


@pytest.mark.parametrize(
    "override",
    [
        "resources.nodes=3",
        "hydra.run.dir=/x",
        "hydra/launcher=jeanzay",
        "+mine.depth=3",  # a key of the user's own, added on purpose
        "cluster=jeanzay_h100",
        "resume=never",
    ],
)
def test_keys_of_known_sections_pass(override: str) -> None:
    check_sections([override], GROUPS)


def test_validate_says_it_before_composing(capsys) -> None:
    assert main(["validate", "resource.nodes=3"]) == 2
    err = capsys.readouterr().err
    assert "did you mean resources.nodes=3?" in err and "RootConfig" not in err


def test_cluster_list_is_clusters(capsys) -> None:
    assert main(["clusters"]) == 0
    listed = capsys.readouterr().out
    assert main(["cluster", "list"]) == 0
    assert capsys.readouterr().out == listed and "jeanzay_h100" in listed


def test_train_help_is_the_toolkits_page() -> None:
    import subprocess
    import sys

    shown = subprocess.run(
        [sys.executable, "-m", "jeanzay_kit.cli", "train", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    page = shown.stdout
    assert page.startswith("usage: jzk train [KEY=VALUE ...]") and "Common keys" in page
    assert "powered by Hydra" not in page and "base_" not in page and len(page.splitlines()) < 40
    assert "--hydra-help" in page  # Hydra's own page is one option away
