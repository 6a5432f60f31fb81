"""Paths users really have (issue 32): job.log_dir, job.run_dir and job.workdir absolute,
on another filesystem than the code ($SCRATCH on Jean Zay: /dev/shm here), with spaces,
through a symlink, or unwritable. Every `jzk` subcommand runs over each: it works, or it
refuses in one line naming the key; no Python traceback reaches the user.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.distributed.conftest import REPO
from tests.distributed.test_your_model import jzk

# cluster=jeanzay_h100 is rendered and validated here; submitting needs sbatch, whose
# refusal (no cluster here) must also come back as one line.
H100 = ("cluster=jeanzay_h100", "cluster.account=abc@h100", "resources.gpus_per_node=1")
SMALL = ("train.steps=4", "train.log_every=2", "resources.gpus_per_node=1")


def _other_filesystem(tmp_path: Path) -> Path:
    """A folder on another filesystem than tmp_path when there is one (/dev/shm)."""
    shm = Path("/dev/shm")
    if shm.is_dir() and shm.stat().st_dev != tmp_path.stat().st_dev:
        folder = shm / f"jzk scratch {tmp_path.name}"
        folder.mkdir(parents=True, exist_ok=True)
        return folder
    return tmp_path / "scratch fs"


@pytest.fixture
def places(tmp_path: Path):
    project = tmp_path / "my project"
    shutil.copytree(REPO / "docs" / "examples" / "your_script", project)
    scratch = _other_filesystem(tmp_path)
    link = tmp_path / "link to scratch"
    link.symlink_to(scratch, target_is_directory=True)
    yield project, scratch, link
    if scratch.is_relative_to("/dev/shm"):
        shutil.rmtree(scratch, ignore_errors=True)


# One set of paths for every command (suite time: a case for each kind ran every
# command twice): the logs through a link with spaces in its name to the other
# filesystem, the run directory inside the project (so out of its code snapshot), a
# loop's run through the link.
def _paths(project: Path, link: Path) -> list[str]:
    run_dir = project / "run s" / "runs" / "one run"
    return [f"job.log_dir={link / 'slurm logs'}", f"job.run_dir={run_dir}"]


def _clean(done, what: str) -> None:
    text = done.stdout + done.stderr
    assert "Traceback" not in text, f"{what}:\n{text[-3000:]}"


@pytest.mark.timeout(600)
def test_every_command_works_over_such_paths(places) -> None:
    project, _scratch, link = places
    paths = _paths(project, link)
    script = (
        "job.entry=train.py",
        "--",
        "config/tiny.py",
        "--max_iters=3",
        "--out_dir=${job.run_dir}",
    )
    run_dir = Path(paths[1].split("=", 1)[1])
    for args in (
        ("init", str(run_dir.parent / "new project")),
        ("clusters",),
        ("validate", *H100, *paths, *script),
        ("render", *H100, *paths, *script),
        ("train", *paths, "resources.gpus_per_node=1", *script),
        ("status", str(run_dir)),
        ("check", *paths, *SMALL),
        ("train", *SMALL, f"job.run_dir={link / 'loop'}"),
        ("status", str(link / "loop")),
        ("report", str(link / "loop")),
        ("ckpt", "list", str(link / "loop")),
        ("submit", *H100, *paths, *script),
    ):
        done = jzk(project, *args)
        _clean(done, " ".join(args))
        if args[0] == "submit":  # no Slurm here: sbatch's refusal, as one error line
            assert done.returncode in (0, 2), done.stderr[-2000:]
        else:
            assert done.returncode == 0, (args, done.stderr[-2000:])
    # The snapshot went to the log folder, wherever it is, and holds the code only.
    (snapshot,) = (Path(paths[0].split("=", 1)[1]) / "code").iterdir()
    assert (snapshot / "train.py").is_file() and not (snapshot / "run s").exists()
    assert (run_dir / "ckpt.pt").is_file()


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("job.log_dir=/proc/no such/logs", "job.log_dir=/proc/no such/logs cannot be written"),
        ("job.run_dir=/proc/no such/run", "job.run_dir=/proc/no such/run cannot be written"),
        ("job.workdir=relative/dir", "job.workdir=relative/dir must be an absolute path"),
    ],
)
def test_a_path_that_cannot_work_is_refused_in_one_line(override: str, key: str, places) -> None:
    project, _, _ = places
    script_run = ("train", override, "job.entry=train.py", "resources.gpus_per_node=1")
    for args in (
        ("render", *H100, override, "job.entry=train.py"),
        ("submit", *H100, override, "job.entry=train.py"),
        # A local run ignores job.log_dir: the toolkit loop's run below shows it once.
        *([] if "log_dir" in override else [script_run]),
        ("train", override, *SMALL),
    ):
        done = jzk(project, *args)
        _clean(done, " ".join(args))
        if "log_dir" in override and args[0] == "train":
            continue  # a local run writes no logs there: nothing to refuse
        if "run_dir" in override and args[0] == "render":
            continue  # the script may be for another machine; its job checks at start
        assert done.returncode == 2, (args, done.stdout[-1000:], done.stderr[-2000:])
        assert key in done.stderr, (args, done.stderr[-2000:])
