"""Issue 54 point 7: what `jzk train` and `jzk cluster discover` say.

- Every composition error of `jzk train` / `python train.py` is the one line `jzk
  validate` gives, exit 2, never Hydra's message or traceback.
- `jzk cluster discover` never hides a shipped profile: a ClusterName that is one gets a
  name of its own (said), `--name`/`-o` of one is refused.
- A new run of a script whose other arguments left a run with files beside it says so in
  one line naming that run directory and job.args_may_change (and still starts).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jeanzay_kit.cli import main
from jeanzay_kit.rundir.run_directory import RunDir
from jeanzay_kit.script.script_files import earlier_run_line
from jeanzay_kit.script.script_rules import ScriptCommand, changed_options
from jeanzay_kit.slurm.discover import Accounting, discover_profile, profile_name
from tests.unit.test_discover import CONFIG, NODES, PARTITIONS

REPO = Path(__file__).resolve().parents[2]

# ---- composition errors -------------------------------------------------------------------

COMPOSITION_ERRORS = [
    ["data=custom", "data._target_=my.Dataset"],  # the default model's ${data.in_dim}
    ["model.in_dim=${nope.x}"],
    ["train.steps=abc"],
    ["train.stepz=3"],
    ["resources.nodes"],
    ["job.name=${oops"],
]


@pytest.mark.parametrize("overrides", COMPOSITION_ERRORS, ids=lambda o: " ".join(o))
@pytest.mark.parametrize("flags", [[], ["-m"]], ids=["run", "sweep"])
def test_jzk_train_says_what_jzk_validate_says(
    overrides: list[str], flags: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["validate", *overrides]) == 2
    said = capsys.readouterr().err.strip()
    assert said.startswith("jzk validate: error: ") and "\n" not in said
    with pytest.raises(SystemExit) as ended:
        main(["train", *flags, *overrides])
    assert ended.value.code == 2
    assert capsys.readouterr().err.strip() == said.replace("jzk validate:", "jzk train:", 1)


def test_python_train_py_of_a_custom_dataset_under_the_default_model(tmp_path: Path) -> None:
    """As the issue met it: one line, exit 2, no traceback."""
    done = subprocess.run(
        [sys.executable, str(REPO / "train.py"), "data=custom", "data._target_=my.Dataset"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines() == [
        "train.py: error: model.in_dim=null Interpolation key 'data.in_dim' not found. "
        "HINT: an interpolation ${a.b} names a key of the config"
    ]


# ---- jzk cluster discover ---------------------------------------------------------------

SHIPPED = {"local", "slurm_local", "generic_slurm", "local_slurm2"}


@pytest.mark.parametrize(
    ("given", "cluster_name", "name", "noted"),
    [
        (None, "bigsite", "bigsite", False),
        (None, None, "my_cluster", False),
        (None, "local", "local_slurm", True),
        (None, "slurm_local", "slurm_local_slurm", True),
        ("mine", "local", "mine", False),
    ],
)
def test_a_profile_never_takes_a_shipped_name(
    given: str | None, cluster_name: str | None, name: str, noted: bool
) -> None:
    got, note = profile_name(given, cluster_name, SHIPPED)
    assert got == name and (note is not None) == noted
    if note:
        assert f"ClusterName {cluster_name} is the name of a shipped profile" in note


def test_a_shipped_name_given_is_refused() -> None:
    with pytest.raises(ValueError, match="--name local is a shipped profile"):
        profile_name("local", "bigsite", SHIPPED)


def test_a_cluster_named_local_gets_a_profile_of_its_own() -> None:
    config = CONFIG.replace("bigsite", "local")
    found = discover_profile(
        config, PARTITIONS, NODES, Accounting(None, None, missing="x"), shipped=SHIPPED
    )
    assert found.name == "local_slurm"
    assert any("named local_slurm so as not to hide it" in n for n in found.notes)


def _fake_slurm(bin_dir: Path, cluster_name: str) -> None:
    """scontrol answering as a cluster named `cluster_name`; sacctmgr without accounting."""
    texts = bin_dir / "texts"
    texts.mkdir(parents=True)
    (texts / "config").write_text(CONFIG.replace("bigsite", cluster_name))
    (texts / "partition").write_text(PARTITIONS)
    (texts / "node").write_text(NODES)
    (bin_dir / "scontrol").write_text(f'#!/bin/sh\ncat "{texts}/$2"\n')
    (bin_dir / "sacctmgr").write_text("#!/bin/sh\necho 'no accounting' >&2\nexit 1\n")
    for tool in ("scontrol", "sacctmgr"):
        (bin_dir / tool).chmod(0o755)


def test_discover_on_a_cluster_named_local_keeps_plain_jzk_train_working(tmp_path: Path) -> None:
    _fake_slurm(tmp_path / "bin", "local")
    home = tmp_path / "config-home"
    env = {
        **os.environ,
        "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "JZK_CONFIG_HOME": str(home),
    }

    def jzk(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "jeanzay_kit.cli", *args],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )

    done = jzk("cluster", "discover")
    assert done.returncode == 0, done.stderr
    assert "named local_slurm so as not to hide it" in done.stderr
    assert sorted(p.name for p in (home / "cluster").iterdir()) == ["local_slurm.yaml"]
    validated = jzk("validate")  # cluster=local, the shipped one
    assert validated.returncode == 0, validated.stderr
    assert "OK: the request fits the profile." in validated.stdout
    for args, words in [
        (("--name", "local"), "--name local is a shipped profile"),
        (("-o", "conf/cluster/local.yaml"), "local is a shipped profile"),
    ]:
        refused = jzk("cluster", "discover", *args)
        assert refused.returncode == 2 and words in refused.stderr, refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert not (tmp_path / "conf").exists()


# ---- a changed script command -----------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "changed"),
    [
        (["--epochs", "12"], ["--epochs", "14"], ["--epochs"]),
        (["--epochs=12"], ["--epochs=14"], ["--epochs"]),
        (["--lr", "1e-3", "--epochs", "12"], ["--epochs", "12", "--lr", "1e-3"], []),
        (["--fast"], [], ["--fast"]),
        (["data.txt"], ["other.txt"], []),  # positional: nothing to name
    ],
)
def test_changed_options(old: list[str], new: list[str], changed: list[str]) -> None:
    assert changed_options(old, new) == changed


def _script_run(parent: Path, name: str, entry: str, args: list[str], ckpt: bool) -> Path:
    run = parent / name
    (run / "cwd" / "out").mkdir(parents=True)
    (run / "command.json").write_text(json.dumps({"entry": entry, "args": args}))
    if ckpt:
        (run / "cwd" / "out" / "ckpt.pt").write_text("weights")
    return run


@pytest.mark.parametrize(
    ("entry", "ckpt", "job_name", "said"),
    [
        ("train.py", True, "jzk", True),
        ("train.py", False, "jzk", False),  # it left nothing
        ("other.py", True, "jzk", False),  # another script
        ("train.py", True, "other", False),  # another job.name
    ],
)
def test_an_earlier_run_of_the_script_is_named(
    tmp_path: Path, entry: str, ckpt: bool, job_name: str, said: bool
) -> None:
    old = _script_run(tmp_path, "jzk-aaaa1111", entry, ["--epochs", "12"], ckpt)
    new = tmp_path / "jzk-bbbb2222"
    line = earlier_run_line(RunDir(new), job_name, ScriptCommand("train.py", ("--epochs", "14")))
    if not said:
        assert line is None
        return
    assert line is not None and "\n" not in line
    assert line.startswith(f"jzk: {old} holds a run of the same script with other arguments")
    assert "(--epochs 12)" in line and "out/ckpt.pt" in line
    assert line.endswith(f"job.run_dir={old} job.args_may_change='[--epochs]'")


def test_of_several_earlier_runs_the_newest_is_named_in_the_line_and_its_hint(
    tmp_path: Path,
) -> None:
    # The hint named the last folder looked at, not the one the line names.
    older = _script_run(tmp_path, "jzk-cccc3333", "train.py", ["--epochs", "10"], True)
    newest = _script_run(tmp_path, "jzk-aaaa1111", "train.py", ["--epochs", "12"], True)
    os.utime(older / "cwd" / "out" / "ckpt.pt", (1, 1))
    line = earlier_run_line(
        RunDir(tmp_path / "jzk-bbbb2222"), "jzk", ScriptCommand("train.py", ("--epochs", "14"))
    )
    assert line is not None and line.startswith(f"jzk: {newest} holds")
    assert f"job.run_dir={newest} " in line and str(older) not in line


def test_a_run_that_exists_resumes_without_a_word(tmp_path: Path) -> None:
    _script_run(tmp_path, "jzk-aaaa1111", "train.py", ["--epochs", "12"], True)
    same = _script_run(tmp_path, "jzk-bbbb2222", "train.py", ["--epochs", "14"], False)
    assert (
        earlier_run_line(RunDir(same), "jzk", ScriptCommand("train.py", ("--epochs", "14"))) is None
    )


SAVING = """\
import argparse, os
parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int)
epochs = parser.parse_args().epochs
os.makedirs("out", exist_ok=True)
with open("out/ckpt.pt", "w") as f:
    f.write(str(epochs))
"""


@pytest.mark.timeout(300)
def test_jzk_train_of_a_changed_script_command_names_the_earlier_run(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SAVING)

    def train(epochs: str) -> subprocess.CompletedProcess[str]:
        argv = ["train", "job.entry=train.py", "resources.gpus_per_node=1", "--", "--epochs"]
        return subprocess.run(
            [sys.executable, "-m", "jeanzay_kit.cli", *argv, epochs],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )

    first = train("12")
    assert first.returncode == 0, first.stderr[-2000:]
    assert "holds a run" not in first.stderr
    (old,) = (tmp_path / "outputs").iterdir()
    second = train("14")
    assert second.returncode == 0, second.stderr[-2000:]
    (line,) = [x for x in second.stderr.splitlines() if "holds a run" in x]
    assert line.startswith(f"jzk: {old} holds a run of the same script")
    assert "job.args_may_change='[--epochs]'" in line
    assert len(list((tmp_path / "outputs").iterdir())) == 2  # the new run still started


def test_a_local_sweep_point_that_does_not_resolve_is_one_line(tmp_path: Path) -> None:
    """Swept values: each point is composed by Hydra's launcher; the first that does not
    resolve is named in one line (config/resolvers.py, which names its folder)."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "jeanzay_kit.cli",
            "train",
            "-m",
            "data=custom",
            "data._target_=my.Dataset",
            "+data.in_dim=8,16",
            f"hydra.sweep.dir={tmp_path / 'sweep'}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if "error" in line.lower()]
    assert errors == [
        "jzk train: error: sweep point (data=custom data._target_=my.Dataset +data.in_dim=8): "
        "model.out_dim=null Interpolation key 'data.out_dim' not found. HINT: an interpolation "
        "${a.b} names a key of the config"
    ]
    assert "Traceback" not in done.stderr
