"""The public surface, pinned: every `jzk` command and flag, and every config key with its
default, generated from the real parser and the composed default config, compared with
one checked-in list (tests/golden/surface.txt). Adding, renaming or re-defaulting a flag
or a key is then a deliberate edit of that list, seen in review, as torchtitan pins its
command line (tests/unit_tests/test_no_new_cli_options.py).

The list is the contract users' scripts and configs are written against: a line that
disappears is a rename or a removal (the house rule: rename none)."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import pytest

from jeanzay_kit.cli import build_parser
from jeanzay_kit.config.compose import compose_unresolved

SURFACE = Path(__file__).resolve().parents[1] / "golden" / "surface.txt"
UPDATE = os.environ.get("JZK_UPDATE_GOLDEN") == "1"
HOW = (
    "If the change is intended (a new flag or key, a new default), accept it with: "
    "JZK_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/unit/test_surface.py, then "
    "review `git diff tests/golden/surface.txt` and say why in the commit message"
)


def _sub_actions(parser: argparse.ArgumentParser) -> list[argparse._SubParsersAction]:
    return [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]


def _flag_lines(path: str, parser: argparse.ArgumentParser) -> list[str]:
    """One line per argument of one command: its spellings (or its positional name),
    and its default."""
    out = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        name = ", ".join(action.option_strings) if action.option_strings else action.dest
        default = action.default if action.default is not argparse.SUPPRESS else None
        out.append(f"flag  {path} {name} = {json.dumps(default, default=repr)}")
    return out


def _command_lines(path: str, parser: argparse.ArgumentParser) -> list[str]:
    """The command, its flags, then its actions (`jzk ckpt list`), depth first. An alias
    (argparse's second name of one parser, or a parser marked `alias_of`) is one line."""
    if alias_of := parser.get_default("alias_of"):
        return [f"alias {path} -> {alias_of}"]
    out = [f"cmd   {path}", *_flag_lines(path, parser)]
    for sub in _sub_actions(parser):
        seen: dict[int, str] = {}
        for name, child in sub.choices.items():
            if id(child) in seen:
                out.append(f"alias {path} {name} -> {path} {seen[id(child)]}")
                continue
            seen[id(child)] = name
            out += _command_lines(f"{path} {name}", child)
    return out


def _key_lines(prefix: str, value: object) -> list[str]:
    if isinstance(value, dict) and value:
        return [line for k, v in value.items() for line in _key_lines(f"{prefix}{k}.", v)]
    return [f"key   {prefix[:-1]} = {json.dumps(value, sort_keys=True)}"]


def surface() -> str:
    """What a user can type and configure, one line each: sorted within each part so
    the diff of a change shows only that change."""
    commands = _command_lines("jzk", build_parser())
    keys = _key_lines("", compose_unresolved([]))
    return "\n".join([*commands, *sorted(keys)]) + "\n"


@pytest.fixture
def plain_user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The shipped surface, not this machine's: no project conf/, no user profiles, no
    cached compositions."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("JZK_CONFIG_HOME", str(tmp_path / "no-user-config"))
    monkeypatch.setenv("JZK_COMPOSE_CACHE", "0")


@pytest.mark.usefixtures("plain_user")
def test_the_public_surface_is_the_checked_in_list() -> None:
    now = surface()
    if UPDATE:
        SURFACE.write_text(now)
    if not SURFACE.exists():
        pytest.fail(f"no {SURFACE}. {HOW}")
    before = SURFACE.read_text().splitlines()
    after = now.splitlines()
    added = [line for line in after if line not in before]
    gone = [line for line in before if line not in after]
    assert not added and not gone, f"the public surface changed: added {added}, gone {gone}. {HOW}"


@pytest.mark.usefixtures("plain_user")
def test_the_list_names_every_command_and_each_key_once() -> None:
    """The generator itself: every top-level command is listed, no key twice, and a
    default is read from the config (a change of one shows)."""
    lines = surface().splitlines()
    commands = {line.split()[2] for line in lines if line.startswith("cmd   jzk ")}
    top = set(_sub_actions(build_parser())[0].choices)
    assert commands == top
    keys = [line.split(" = ")[0] for line in lines if line.startswith("key ")]
    assert len(keys) == len(set(keys))
    assert "key   train.steps = 200" in lines
    assert "flag  jzk status --json = false" in lines
