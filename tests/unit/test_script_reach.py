"""script/reach.py: what a script of the user's reaches, read before anything runs. A
script that reaches no module naming the toolkit is told it cannot be rehearsed; one
that does, through modules of its own, goes on; a script started as several processes
that starts no process group is warned; one that cannot be read as Python is left be."""

from __future__ import annotations

from pathlib import Path

import pytest

from jeanzay_kit.errors import JzkError
from jeanzay_kit.rehearse.rehearsal import refuse_plain_script
from jeanzay_kit.script.reach import (
    TOOLKIT,
    entry_file,
    imported_names,
    imports_any,
    names_any,
    single_process_warning,
)


@pytest.mark.parametrize(
    ("source", "names"),
    [
        ("import torch, numpy as np", [("torch", 0), ("numpy", 0)]),
        ("from model import GPT", [("model", 0), ("model.GPT", 0)]),
        ("from . import utils", [("utils", 1)]),
        ("from ..lib.io import *", [("lib.io", 2)]),
        ("def f(:\n", []),  # does not parse: nothing
    ],
)
def test_every_name_an_import_may_load(source: str, names: list[tuple[str, int]]) -> None:
    assert imported_names(source) == names


def _project(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


@pytest.mark.parametrize(
    ("files", "reaches"),
    [
        # nanoGPT's layout: the script, its model, its configurator; torch only.
        (
            {
                "train.py": "import torch\nfrom model import GPT\n"
                "exec(open('configurator.py').read())",
                "model.py": "import torch.nn as nn\nclass GPT(nn.Module): pass",
                "configurator.py": "import sys",
            },
            False,
        ),
        # The session, two imports away, in a package of the project's.
        (
            {
                "train.py": "from mylib.loop import train\ntrain()",
                "mylib/__init__.py": "",
                "mylib/loop.py": "from .session_use import go\ndef train(): go()",
                "mylib/session_use.py": "from jeanzay_kit import Session\ndef go(): pass",
            },
            True,
        ),
        # A src/ layout, and the toolkit named to importlib rather than imported.
        (
            {
                "train.py": "import pkg",
                "src/pkg/__init__.py": "import importlib\nimportlib.import_module('jeanzay_kit')",
            },
            True,
        ),
        # Modules that import each other: read once each.
        ({"train.py": "import a", "a.py": "import b", "b.py": "import a"}, False),
    ],
)
def test_the_toolkit_is_looked_for_through_the_users_own_modules(
    tmp_path: Path, files: dict[str, str], reaches: bool
) -> None:
    project = _project(tmp_path, files)
    found = names_any(project / "train.py", project, TOOLKIT, installed=lambda _top: None)
    assert found is reaches


@pytest.mark.parametrize(
    ("files", "imports"),
    [
        ({"train.py": '"""Knows nothing of jeanzay_kit."""\nimport torch'}, False),
        ({"train.py": "from jeanzay_kit import session"}, True),
        ({"train.py": "import loop", "loop.py": "import jeanzay_kit.runtime"}, True),
        ({"train.py": "from . import jeanzay_kit"}, False),  # a module of its own
    ],
)
def test_a_script_on_the_session_api_is_told_by_its_imports_not_its_words(
    tmp_path: Path, files: dict[str, str], imports: bool
) -> None:
    """The local launcher holds a stop signal until such a script's first heartbeat
    (node/script_local_watch.py): a docstring naming the toolkit held a plain script's
    signal until it had finished."""
    project = _project(tmp_path, files)
    found = imports_any(project / "train.py", project, TOOLKIT, installed=lambda _top: None)
    assert found is imports


def test_a_module_installed_from_the_users_own_folder_is_followed(tmp_path: Path) -> None:
    """An editable install of the user's library, outside the project's folder."""
    lib = _project(tmp_path / "lib", {"mylib/__init__.py": "from jeanzay_kit import Session"})
    project = _project(tmp_path / "proj", {"train.py": "import mylib"})

    def installed(top: str) -> Path | None:
        return lib / "mylib" / "__init__.py" if top == "mylib" else None

    assert names_any(project / "train.py", project, TOOLKIT, installed=installed) is True
    assert names_any(project / "train.py", project, TOOLKIT, lambda _t: None) is False


@pytest.mark.parametrize(
    ("entry", "found"),
    [
        ("train.py --steps 10", "train.py"),
        ("-m pkg.train", "pkg/train.py"),
        ("-m pkg", "pkg/__main__.py"),
        ("run.sh", None),  # not Python: undecided
        ("missing.py", None),
    ],
)
def test_the_entrys_python_file(tmp_path: Path, entry: str, found: str | None) -> None:
    files = {"train.py": "", "pkg/__init__.py": "", "pkg/train.py": "", "pkg/__main__.py": ""}
    project = _project(tmp_path, {**files, "run.sh": "python train.py"})
    got = entry_file(entry, project)
    assert (None if got is None else got.relative_to(project).as_posix()) == found


def test_a_plain_script_is_refused_naming_it_and_the_way_that_works(tmp_path: Path) -> None:
    project = _project(tmp_path, {"train.py": "import torch\n", "run.sh": "python train.py"})
    with pytest.raises(JzkError) as err:
        refuse_plain_script("train.py --steps 10", project)
    said = str(err.value)
    assert "job.entry=train.py --steps 10" in said and "train.py" in said
    assert "session" in said and "HINT: " in said
    refuse_plain_script("run.sh", project)  # undecided: goes on


def test_a_relative_import_above_the_root_is_nowhere() -> None:
    from jeanzay_kit.script.reach import module_files

    assert module_files("x", 9, Path("/a/b.py"), [Path("/a")]) == []
    assert module_files("x", 2, Path("/a/b/c.py"), []) == [
        Path("/a/x.py"),
        Path("/a/x/__init__.py"),
    ]


@pytest.mark.parametrize(
    ("source", "processes", "warned"),
    [
        ("import torch\nfor i in range(9): pass", 2, True),  # nanoGPT without its DDP part
        ("import torch\nfor i in range(9): pass", 1, False),  # one process: nothing to say
        ("import torch.distributed as dist\ndist.init_process_group('gloo')", 2, False),
        ("import idr_torch", 4, False),
        ("import lightning as L", 2, False),
        ("import os\nrank = int(os.environ['LOCAL_RANK'])", 2, False),
    ],
)
def test_a_script_started_as_several_processes_that_starts_no_group_is_warned(
    tmp_path: Path, source: str, processes: int, warned: bool
) -> None:
    project = _project(tmp_path, {"train.py": source})
    said = single_process_warning("train.py --steps 3", project, processes)
    assert (said is not None) is warned, said
    if said:
        assert f"runs as {processes} processes" in said and "train.py" in said
        assert "HINT: resources.gpus_per_node=1 resources.nodes=1" in said
