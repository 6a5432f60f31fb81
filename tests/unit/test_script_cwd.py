"""What a script task's working directory shows of the project (node/script_cwd_rules.py),
and the folder it makes (node/script_cwd.py), on real files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jeanzay_kit.config.schema import SCRIPT_OUTPUTS
from jeanzay_kit.node.script_cwd import prepare_script_cwd, start_line
from jeanzay_kit.node.script_cwd_rules import shadow_plan
from jeanzay_kit.project.places import command_paths, is_output_option
from jeanzay_kit.rundir.run_directory import RunDir
from tests.helpers import write_files


@pytest.mark.parametrize(
    ("name", "output"),
    [
        ("--out_dir", True),
        ("--output_dir", True),
        ("--save-dir", True),
        ("checkpoint_path", True),
        ("--ckpt_dir", True),
        ("--log_dir", True),
        ("out", True),
        ("--data_dir", False),
        ("--init_from", False),
        ("--resume_from", False),
        ("--outlier", False),
        ("--dataset", False),
    ],
)
def test_output_options(name: str, output: bool) -> None:
    assert is_output_option(name) is output


@pytest.mark.parametrize(
    ("args", "outputs", "named"),
    [
        (
            ["--out_dir=out-shakespeare", "--dataset=shakespeare"],
            ["out-shakespeare"],
            ["shakespeare"],
        ),
        (["--output_dir", "runs/a", "--data", "data/x.pt"], ["runs/a"], ["--data", "data/x.pt"]),
        (["out_dir=./out/", "epochs=3"], ["out"], ["3"]),
        (["trainer.default_root_dir=ckpts"], [], ["ckpts"]),
        (["--save_dir=/abs/path", "--log_dir=../up", "--out_dir=${job.run_dir}"], [], []),
        (["--resume_from=checkpoints/e3.pt"], [], ["checkpoints/e3.pt"]),
    ],
)
def test_command_paths(args: list[str], outputs: list[str], named: list[str]) -> None:
    assert command_paths(args) == (outputs, named)


# A project as a listing: {folder: {name: is_folder}}.
PROJECT = {
    "": {
        "train.py": False,
        "data": True,
        "pretrained": True,
        "out": True,
        "snapshot.pt": False,
        "outputs": True,
        "exp": True,
    },
    "data": {"shakespeare": True, "train.pt": False, "vocab.pkl": False},
    "data/shakespeare": {"train.bin": False, "meta.pkl": False},
    "pretrained": {"model.safetensors": False},
    "out": {"ckpt.pt": False, "e3.pt": False},
    "exp": {"a": True, "notes.txt": False},
    "exp/a": {"ckpt.pt": False},
    "outputs": {"jzk-1": True},
}


def plan(outputs: list[str], named: list[str] = (), always: tuple[str, ...] = ("outputs",)):  # type: ignore[assignment]
    return shadow_plan(lambda rel: PROJECT.get(rel, {}), outputs, named, always)


@pytest.mark.parametrize(
    ("outputs", "named", "links", "mirrored", "own", "hidden"),
    [
        # Nothing is an output: every top-level entry one link, data and weights included.
        (
            [],
            [],
            ["data", "exp", "out", "outputs", "pretrained", "snapshot.pt", "train.py"],
            [],
            [],
            [],
        ),
        # The defaults: out/ and the root snapshot are the run's own; data stays one link.
        (
            ["out", "snapshot.pt"],
            [],
            ["data", "exp", "outputs", "pretrained", "train.py"],
            [],
            ["out"],
            ["out", "snapshot.pt"],
        ),
        # A nested output: the way to it is mirrored, its siblings linked.
        (
            ["exp/a"],
            [],
            ["data", "exp/notes.txt", "out", "outputs", "pretrained", "snapshot.pt", "train.py"],
            ["exp"],
            ["exp/a"],
            ["exp/a"],
        ),
        # An output that does not exist yet (--out_dir=exp/b): exp mirrored, b made by the script.
        (
            ["exp/b"],
            [],
            [
                "data",
                "exp/a",
                "exp/notes.txt",
                "out",
                "outputs",
                "pretrained",
                "snapshot.pt",
                "train.py",
            ],
            ["exp"],
            [],
            [],
        ),
        # A path the command names inside an output place is shown.
        (
            ["out", "snapshot.pt"],
            ["out/e3.pt", "snapshot.pt", "nope/x"],
            ["data", "exp", "outputs", "pretrained", "snapshot.pt", "train.py", "out/e3.pt"],
            [],
            ["out"],
            ["out"],
        ),
        # The toolkit's own folder is never an output place.
        (
            ["outputs/jzk-1"],
            [],
            ["data", "exp", "out", "outputs", "pretrained", "snapshot.pt", "train.py"],
            [],
            [],
            [],
        ),
    ],
)
def test_shadow_plan(outputs, named, links, mirrored, own, hidden) -> None:  # type: ignore[no-untyped-def]
    got = plan(outputs, named)
    assert (got.links, got.mirrored, got.own, got.hidden) == (links, mirrored, own, hidden)


def test_the_default_outputs_on_disk(tmp_path: Path) -> None:
    """A nanoGPT and a fine-tuning layout: every data file shown, at any depth and of any
    suffix; the stale checkpoint and the root snapshot not; new files land in the run."""
    project = tmp_path / "proj"
    files = {
        "train.py": "print()",
        "data/shakespeare_char/train.bin": "t",
        "data/shakespeare_char/meta.pkl": "m",
        "data/train.pt": "p",
        "data/vocab.pkl": "v",
        "pretrained/model.safetensors": "w",
        "out/ckpt.pt": "stale",
        "out-shakespeare-char/ckpt.pt": "stale",
        "snapshot.pt": "stale",
        "outline.txt": "a file, not an output folder",
        ".hydra/config.yaml": "an earlier start's record of a Hydra app run in the project",
        "checkpoints/llama/model.safetensors": "w",
        "checkpoints/llama/lit_model.pth": "w",
        "config/train_shakespeare_char.py": "batch_size = 4",
    }
    write_files(project, files)
    run_dir = project / "outputs" / "jzk-1"
    named = ["config/train_shakespeare_char.py", "checkpoints/llama/model.safetensors"]
    cwd, shadow = prepare_script_cwd(
        RunDir(run_dir), project, None, always=["outputs"], outputs=SCRIPT_OUTPUTS, args=named
    )
    hidden = ("out/ckpt.pt", "out-shakespeare-char/ckpt.pt", "snapshot.pt", ".hydra/config.yaml")
    hidden += ("checkpoints/llama/lit_model.pth",)  # the folder is an output; one file named
    for rel in files:
        shown = (cwd / rel).exists()
        assert shown is (rel not in hidden), rel
    assert (cwd / "out").is_dir() and not (cwd / "out").is_symlink()
    line = start_line(cwd, shadow)
    assert line is not None and "job.script_outputs" in line
    assert ".hydra/, checkpoints/, out/, out-shakespeare-char/, snapshot.pt" in line
    # A relative write of a new file lands in the run, never in the project.
    (cwd / "out" / "ckpt.pt").write_text("mine")
    assert (project / "out" / "ckpt.pt").read_text() == "stale"
    # Run again (a requeue): the script's own files are kept, links stay.
    cwd, _ = prepare_script_cwd(
        RunDir(run_dir), project, None, always=["outputs"], outputs=SCRIPT_OUTPUTS
    )
    assert (cwd / "out" / "ckpt.pt").read_text() == "mine"
    assert os.path.islink(cwd / "data")


def test_a_folder_once_linked_becomes_mirrored(tmp_path: Path) -> None:
    """A requeue whose output places changed (--out_dir=exp/a added): the old link to the
    whole folder is replaced by a mirrored folder."""
    project = tmp_path / "p"
    (project / "exp" / "a").mkdir(parents=True)
    (project / "exp" / "a" / "ckpt.pt").write_text("stale")
    (project / "exp" / "notes.txt").write_text("n")
    run_dir = tmp_path / "run"
    cwd, _ = prepare_script_cwd(RunDir(run_dir), project, None, outputs=())
    assert os.path.islink(cwd / "exp")
    cwd, shadow = prepare_script_cwd(
        RunDir(run_dir), project, None, outputs=(), args=["--out_dir=exp/a"]
    )
    assert not os.path.islink(cwd / "exp") and os.path.islink(cwd / "exp" / "notes.txt")
    assert (cwd / "exp" / "a").is_dir() and not (cwd / "exp" / "a" / "ckpt.pt").exists()
    assert shadow.hidden == ["exp/a"]


# ---- the code snapshot in the working directory ----------------------------------------


def _lister(tree: dict[str, dict[str, bool]]):  # type: ignore[no-untyped-def]
    return lambda rel: tree.get(rel, {})


def test_the_working_directory_shows_frozen_code_and_the_projects_data() -> None:
    """A folder the snapshot holds whole is one link to its copy, a folder it holds in
    part (nanoGPT's data/shakespeare_char: prepare.py and train.bin) is mirrored, and
    what it does not hold is reached in the project."""
    project = {
        "": {"train.py": False, "conf": True, "data": True, "pretrained": True, "output": True},
        "conf": {"exp.yaml": False},
        "data": {"shakespeare_char": True},
        "data/shakespeare_char": {"prepare.py": False, "train.bin": False, "meta.pkl": False},
        "pretrained": {"w.pt": False},
        "output": {"train": True},
    }
    snapshot = {
        "": {"train.py": False, "conf": True, "data": True, ".jzk-provenance": True},
        "conf": {"exp.yaml": False},
        "data": {"shakespeare_char": True},
        "data/shakespeare_char": {"prepare.py": False},
    }
    plan = shadow_plan(_lister(project), ["output"], [], frozen=_lister(snapshot))
    assert plan.code_links == ["conf", "data/shakespeare_char/prepare.py", "train.py"]
    assert plan.links == [
        "data/shakespeare_char/meta.pkl",
        "data/shakespeare_char/train.bin",
        "pretrained",
    ]
    assert plan.mirrored == ["data", "data/shakespeare_char"]
    assert plan.own == ["output"] and plan.hidden == ["output"]
    # Without a snapshot (a local run), the same project: every entry from the project.
    local = shadow_plan(_lister(project), ["output"], [])
    assert local.code_links == [] and local.links == ["conf", "data", "pretrained", "train.py"]


def test_a_resume_path_is_an_output_place_of_the_run(tmp_path: Path) -> None:
    """job.resume_args names what the run itself writes: the project's file of that name
    (an earlier plain run's) is never shown, even outside job.script_outputs."""
    project = tmp_path / "proj"
    (project / "results" / "exp").mkdir(parents=True)
    (project / "results" / "exp" / "last.pth.tar").write_text("stale")
    (project / "results" / "notes.txt").write_text("kept")
    run_dir = tmp_path / "run"
    cwd, plan = prepare_script_cwd(
        RunDir(run_dir),
        project,
        None,
        outputs=(),
        resume_args=["--resume", "results/exp/last.pth.tar"],
    )
    assert not (cwd / "results" / "exp" / "last.pth.tar").exists()
    assert (cwd / "results" / "notes.txt").read_text() == "kept"
    assert plan.hidden == ["results/exp/last.pth.tar"]
