"""The user's project: config roots, the import path, the code snapshot, provenance, the
skeleton (jeanzay_kit/project/, config/compose.py). Real files and real git in tmp dirs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from jeanzay_kit.config.compose import (
    PACKAGE_CONFIG_DIR,
    check_group_choices,
    config_roots,
    group_options,
)
from jeanzay_kit.errors import ConfigError, JzkError
from jeanzay_kit.project import snapshot as snapshot_module
from jeanzay_kit.project.import_path import put_project_on_path
from jeanzay_kit.project.provenance import record_run_provenance
from jeanzay_kit.project.skeleton import package_name, skeleton_files
from jeanzay_kit.project.snapshot import SnapshotRules, take_snapshot
from jeanzay_kit.rundir.run_directory import RunDir


def _git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.org", *args],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


# ---- where configs come from ----------------------------------------------------------


def _no_user_env(tmp_path: Path) -> dict[str, str]:
    """An environment whose user folder is empty (not the tester's own profiles)."""
    return {"JZK_CONFIG_HOME": str(tmp_path / "no-user-config")}


def test_the_project_comes_first_then_the_user_then_the_package(tmp_path: Path) -> None:
    roots = config_roots({"JZK_CONFIG_HOME": str(tmp_path / "me")}, tmp_path / "proj")
    assert [(r.origin, r.path) for r in roots] == [
        ("project", (tmp_path / "proj" / "conf").resolve()),
        ("user", tmp_path / "me"),
        ("jeanzay_kit", PACKAGE_CONFIG_DIR),
    ]
    # --config-dir names a whole tree, which takes the package's place.
    other = config_roots({}, tmp_path, tmp_path / "tree")[-1]
    assert (other.origin, other.path) == ("--config-dir", (tmp_path / "tree").resolve())


def test_an_option_of_the_project_hides_the_shipped_one_of_the_same_name(tmp_path: Path) -> None:
    _write(tmp_path, {"proj/conf/cluster/local.yaml": "x: 1\n", "proj/conf/cluster/mine.yaml": ""})
    roots = config_roots({"JZK_CONFIG_HOME": str(tmp_path / "me")}, tmp_path / "proj")
    options = {o.name: o for o in group_options(roots, "cluster")}
    assert options["mine"].root.origin == "project"
    assert options["local"].root.origin == "project"
    assert [r.origin for r in options["local"].shadows] == ["jeanzay_kit"]
    assert (
        options["jeanzay_h100"].root.origin == "jeanzay_kit" and not options["jeanzay_h100"].shadows
    )


@pytest.mark.parametrize(
    "overrides",
    [
        ["model=net"],  # the project's
        ["cluster=jeanzay_h100"],  # the package's
        ["model=net,mlp"],  # a sweep: Hydra checks each value itself
        ["model.hidden=3", "job.name=x"],  # values, not group choices
    ],
)
def test_known_group_choices_pass(tmp_path: Path, overrides: list[str]) -> None:
    _write(tmp_path, {"conf/model/net.yaml": ""})
    check_group_choices(overrides, config_roots(_no_user_env(tmp_path), tmp_path))


def test_an_unknown_choice_lists_every_option_with_its_folder(tmp_path: Path) -> None:
    _write(tmp_path, {"conf/model/net.yaml": "", "conf/model/wide.yaml": ""})
    with pytest.raises(ConfigError) as err:
        check_group_choices(["model=wid"], config_roots(_no_user_env(tmp_path), tmp_path))
    message = str(err.value)
    assert message.startswith("model=wid is not an option of the config group model (")
    assert f"from project {tmp_path / 'conf'}: net, wide" in message
    shipped = "causal_lm, custom, gpt, image_cnn, mlp"
    assert f"from jeanzay_kit {PACKAGE_CONFIG_DIR}: {shipped}" in message
    assert "HINT: did you mean model=wide? or add" in message
    assert str(tmp_path / "conf" / "model" / "wid.yaml") in message


# ---- the import path ------------------------------------------------------------------


def test_the_snapshot_goes_first_on_the_path_else_the_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "path", ["/somewhere", str(tmp_path)])
    assert put_project_on_path({}, tmp_path) == tmp_path
    assert sys.path == [str(tmp_path), "/somewhere"]  # moved to the front, not twice
    used = put_project_on_path({"JZK_CODE_DIR": "logs/code/abc"}, tmp_path)
    assert used == tmp_path / "logs" / "code" / "abc" and sys.path[0] == str(used)


# ---- the snapshot ---------------------------------------------------------------------


def test_a_git_project_snapshot_holds_tracked_and_untracked_but_not_ignored_files(
    tmp_path: Path,
) -> None:
    _write(
        tmp_path,
        {
            ".gitignore": "outputs/\nlogs/\n*.bin\n",
            "pkg/model.py": "A = 1\n",
            "conf/model/net.yaml": "_target_: pkg.model.Net\n",
            "data.bin": "ignored data\n",
            "outputs/run/metrics.jsonl": "{}\n",
        },
    )
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-q", "-m", "one")
    _write(tmp_path, {"pkg/new.py": "B = 2\n"})  # untracked, not ignored
    (tmp_path / "pkg" / "model.py").write_text("A = 3\n")  # uncommitted edit
    snap = take_snapshot(tmp_path, SnapshotRules("logs", ["**/*.py"]))
    assert snap.source == "git" and snap.path.parent == tmp_path / "logs" / "code"
    copied = sorted(
        p.relative_to(snap.path).as_posix()
        for p in snap.path.rglob("*")
        if p.is_file() and not p.is_symlink() and ".jzk-provenance" not in p.parts
    )
    assert copied == [".gitignore", "conf/model/net.yaml", "pkg/model.py", "pkg/new.py"]
    assert (snap.path / "pkg" / "model.py").read_text() == "A = 3\n"  # the tree, not HEAD
    source = json.loads((snap.path / ".jzk-provenance" / "source.json").read_text())
    assert source["git_commit"] == _git(tmp_path, "rev-parse", "HEAD")
    assert source["uncommitted_changes"] and source["untracked_files"] == ["pkg/new.py"]
    diff = (snap.path / ".jzk-provenance" / "uncommitted.diff").read_text()
    assert "-A = 1" in diff and "+A = 3" in diff and "+B = 2" in diff  # untracked kept too

    # The same content: the same folder, not a second copy; new content: a new folder.
    assert take_snapshot(tmp_path, SnapshotRules("logs", ["**/*.py"])).path == snap.path
    (tmp_path / "pkg" / "model.py").write_text("A = 4\n")
    again = take_snapshot(tmp_path, SnapshotRules("logs", ["**/*.py"]))
    assert again.path != snap.path and (snap.path / "pkg" / "model.py").read_text() == "A = 3\n"


def test_a_project_without_git_is_copied_by_its_include_list(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "pkg/model.py": "",
            "conf/data/d.yaml": "",
            "notes.md": "",
            "outputs/x/old.py": "",
            ".venv/lib/site.py": "",
            "logs/code/abc/pkg/model.py": "",
            "venv/pyvenv.cfg": "home = /usr/bin\n",  # a virtual environment, not hidden
            "venv/lib/python3.11/site-packages/torch/__init__.py": "",
        },
    )
    snap = take_snapshot(tmp_path, SnapshotRules("logs", ["**/*.py", "conf/**/*.yaml"]))
    assert snap.source == "snapshot_include" and snap.files == 2
    assert (snap.path / "pkg" / "model.py").exists() and (snap.path / "conf/data/d.yaml").exists()
    assert (snap.path / "notes.md").is_symlink()  # not copied: reached in place
    assert not (snap.path / "outputs").exists()


def test_a_project_too_large_to_be_code_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(tmp_path, {"a.py": "x" * 100, "b.py": "y" * 100})
    monkeypatch.setattr(snapshot_module, "MAX_BYTES", 150)
    with pytest.raises(JzkError, match="job.snapshot=false"):
        take_snapshot(tmp_path, SnapshotRules("logs", ["*.py"]))
    assert not (tmp_path / "logs" / "code").exists() or not any((tmp_path / "logs/code").iterdir())


# ---- provenance of a run --------------------------------------------------------------


def test_a_run_copies_its_snapshot_record_and_keeps_a_history(tmp_path: Path) -> None:
    _write(tmp_path, {"pkg/m.py": "A = 1\n"})
    snap = take_snapshot(tmp_path, SnapshotRules("logs", ["**/*.py"]))
    env = {"JZK_CODE_DIR": str(snap.path.relative_to(tmp_path)), "SLURM_JOB_ID": "7"}
    run_dir = tmp_path / "outputs" / "run"
    record_run_provenance(RunDir(run_dir), env, tmp_path)
    offline = {"HF_HUB_OFFLINE": "1", "HF_HOME": "/work/.cache/huggingface"}
    record_run_provenance(
        RunDir(run_dir), {**env, **offline, "SLURM_JOB_ID": "8"}, tmp_path
    )  # a requeue
    out = run_dir / "provenance"
    assert json.loads((out / "source.json").read_text())["code_dir"] == str(snap.path)
    assert "pytest==" in (out / "packages.txt").read_text()
    history = [json.loads(x) for x in (out / "history.jsonl").read_text().splitlines()]
    assert [h["job_id"] for h in history] == ["7", "8"]
    assert {h["code_dir"] for h in history} == {str(snap.path)}
    assert [h["libraries"] for h in history] == [{}, offline]  # what the libraries were told


# ---- jzk init -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("folder", "package"),
    [
        ("myproj", "myproj"),
        ("my-proj", "my_proj"),
        ("2025 run", "p_2025_run"),
        ("class", "p_class"),
    ],
)
def test_the_skeleton_package_is_a_python_name(folder: str, package: str) -> None:
    assert package_name(folder) == package
    files = skeleton_files(folder)
    assert f"{package}/model.py" in files
    assert f"_target_: {package}.model.Net" in files["conf/model/net.yaml"]
    for name, text in files.items():
        if name.endswith(".py"):
            compile(text, name, "exec")  # the files a user gets are valid Python


def test_renders_of_an_unchanged_project_share_one_small_snapshot(tmp_path: Path) -> None:
    """A git project whose .gitignore lists neither logs/ nor outputs/ (issue 32): every
    render used to freeze the earlier snapshots too (1.5 -> 343 MB over five renders)."""
    _write(tmp_path, {"train.py": "print('hi')\n", "conf/exp.yaml": "lr: 1\n"})
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-q", "-m", "one")
    paths = set()
    for round_ in range(5):
        snap = take_snapshot(tmp_path, SnapshotRules("logs", ["**/*.py"], "outputs/jzk-1234"))
        paths.add(snap.path)
        # What a run and Slurm leave behind, none of it git-ignored.
        _write(
            tmp_path,
            {f"outputs/jzk-1234/ckpt-{round_}.pt": "x" * 1000, f"logs/jzk-{round_}.out": "log"},
        )
    assert len(paths) == 1
    (snap,) = paths
    copied = sorted(
        p.relative_to(snap).as_posix()
        for p in snap.rglob("*")
        if p.is_file() and not p.is_symlink() and ".jzk-provenance" not in p.parts
    )
    assert copied == ["conf/exp.yaml", "train.py"]
    source = json.loads((snap / ".jzk-provenance" / "source.json").read_text())
    assert source["untracked_files"] == []
    # A new snapshot (the code changed) still records none of the outputs in its diff.
    (tmp_path / "train.py").write_text("print('hello')\n")
    changed = take_snapshot(tmp_path, SnapshotRules("logs", ["**/*.py"], "outputs/jzk-1234"))
    diff = (changed.path / ".jzk-provenance" / "uncommitted.diff").read_text()
    assert "+print('hello')" in diff and "ckpt-" not in diff and "jzk-0.out" not in diff


@pytest.mark.parametrize(
    ("log_dir", "run_dir", "left_out"),
    [
        ("logs", "outputs/jzk-1", ["logs", "multirun", "outputs"]),
        ("logs", "runs/exp1", ["logs", "multirun", "outputs", "runs"]),
        ("slurm logs", "ckpt", ["ckpt", "multirun", "outputs", "slurm logs"]),
        ("/elsewhere/logs", "/elsewhere/runs/r", ["multirun", "outputs"]),
    ],
)
def test_the_toolkits_folders_are_left_out_of_a_snapshot(
    tmp_path: Path, log_dir: str, run_dir: str, left_out: list[str]
) -> None:
    from jeanzay_kit.project.snapshot import excluded_folders

    assert excluded_folders(tmp_path.resolve(), log_dir, run_dir) == left_out


def test_an_oversized_diff_is_cut_and_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(tmp_path, {"a.py": "A = 1\n"})
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-q", "-m", "one")
    _write(tmp_path, {"big.py": "# " + "x" * 5000 + "\n"})  # untracked: in the diff
    monkeypatch.setattr(snapshot_module, "MAX_DIFF_BYTES", 1000)
    snap = take_snapshot(tmp_path, SnapshotRules("logs", ["*.py"]))
    provenance = snap.path / ".jzk-provenance"
    diff = (provenance / "uncommitted.diff").read_bytes()
    assert len(diff) < 1500 and b"the diff was cut at 1000" in diff
    assert json.loads((provenance / "source.json").read_text())["uncommitted_diff_cut"]
    assert snap.bytes >= len(diff) + 5000  # the cap counts the provenance too
    # The provenance alone over the cap refuses the snapshot, leaving nothing behind.
    monkeypatch.setattr(snapshot_module, "MAX_BYTES", 5100)
    (tmp_path / "a.py").write_text("A = 2\n")
    with pytest.raises(JzkError, match="with its provenance record"):
        take_snapshot(tmp_path, SnapshotRules("logs", ["*.py"]))
    assert [p.name for p in (tmp_path / "logs" / "code").iterdir()] == [snap.path.name]


def test_rendered_scripts_and_run_folders_never_enter_a_snapshot(tmp_path: Path) -> None:
    """The quickstart's layout (issue 41): `jzk render -o jobs` in a git project whose
    .gitignore lacks jobs/, and a run directory where job.run_dir put it (runs/, not
    outputs/): four identical renders give one snapshot, holding only the code."""
    _write(tmp_path, {"train.py": "print('hi')\n", ".gitignore": "__pycache__/\n"})
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-q", "-m", "one")
    _write(tmp_path, {"runs/a/lease.json": "{}", "runs/a/cwd/snapshot.pt": "w"})
    jzk = str(Path(sys.executable).parent / "jzk")
    snaps = set()
    for _ in range(4):
        done = subprocess.run(
            [jzk, "render", "-o", "jobs", "cluster=slurm_local", "job.entry=train.py"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        snaps.add(done.stderr.split("frozen in ")[1].split()[0])
    assert len(snaps) == 1 and len(list((tmp_path / "logs" / "code").iterdir())) == 1
    (snap,) = snaps
    copied = sorted(
        p.relative_to(snap).as_posix()
        for p in Path(snap).rglob("*")
        if p.is_file() and not p.is_symlink() and ".jzk-provenance" not in p.parts
    )
    assert copied == [".gitignore", "train.py"]
    validate = subprocess.run(
        [jzk, "validate", "cluster=slurm_local", "job.entry=train.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "code snapshot: 2 file(s)" in validate.stdout
