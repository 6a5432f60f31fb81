"""Your own project with an installed jeanzay_kit (issue 22), as a user meets it.

The package is built as a wheel from the repository's files and installed (not editable)
into a fresh virtual environment in a temporary directory; no checkout is on its path
(the heavy dependencies, torch first, are borrowed from the test's own environment with
a .pth line: installing torch again would cost minutes and prove nothing about us).
`jzk init` makes a project somewhere else, and everything after runs from that project's
directory with that environment's `jzk`, as after `source venv/bin/activate`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.slurm.cluster import REPO, manifest_records, run, sacct_states, wait_for

pytestmark = pytest.mark.timeout(600)


def _repo_files() -> list[str]:
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout.decode()
    return [n for n in listed.split("\0") if n and (REPO / n).is_file()]


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh environment with the wheel of this repository installed."""
    root = tmp_path_factory.mktemp("install")
    src = root / "src"
    for name in _repo_files():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, src / name)
    wheel_cmd = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(root)]
    try:
        import setuptools  # noqa: F401

        wheel_cmd.append("--no-build-isolation")  # the build backend is here already
    except ImportError:
        pass
    built = subprocess.run([*wheel_cmd, str(src)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = root.glob("jeanzay_kit-*.whl")
    env_dir = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(env_dir)], check=True, timeout=300)
    python = env_dir / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # torch, hydra, submitit...: the test environment's site-packages, after the venv's
    # own (a path line in a .pth is appended to sys.path; the .pth files *inside* that
    # folder, such as the editable install's finder of this checkout, are not run).
    (Path(purelib) / "jzk_test_dependencies.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n"
    )
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    return env_dir


def _user_env(venv: Path, tmp_path: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in (base or os.environ).items() if k != "PYTHONPATH"}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv)
    env["JZK_CONFIG_HOME"] = str(tmp_path / "user-config")  # none of the tester's profiles
    return env


def _jzk(env: dict[str, str], cwd: Path, *args: str, timeout: float = 300):
    return run([str(Path(env["VIRTUAL_ENV"]) / "bin" / "jzk"), *args], env, cwd, timeout)


def _digest(run_dir: Path) -> str:
    return (run_dir / "model_final.sha256").read_text().strip()


def _run_dir(stdout: str) -> Path:
    return Path(re.search(r"run dir (\S+)", stdout).group(1))


def test_an_installed_wheel_trains_a_project_of_its_own(venv: Path, tmp_path: Path) -> None:
    env = _user_env(venv, tmp_path)
    init = _jzk(env, tmp_path, "init", "proj")
    assert init.returncode == 0, init.stderr
    proj = tmp_path / "proj"
    assert (proj / "proj" / "model.py").is_file() and (
        proj / "conf" / "model" / "net.yaml"
    ).is_file()
    assert "outputs/" in (proj / ".gitignore").read_text()
    # The toolkit comes from the environment, not from a checkout.
    where = run(
        [str(venv / "bin" / "python"), "-c", "import jeanzay_kit; print(jeanzay_kit.__file__)"],
        env,
        proj,
    )
    assert where.stdout.startswith(str(venv)), where.stdout

    first = _jzk(env, proj, "train", "train.steps=20")
    assert first.returncode == 0, first.stderr[-3000:]
    assert "done: 20 steps" in first.stdout
    run_dir = _run_dir(first.stdout)
    assert run_dir.parent == proj / "outputs" and run_dir.name.startswith("proj-")
    source = json.loads((run_dir / "provenance" / "source.json").read_text())
    assert source["project"] == str(proj) and source["git_commit"] is None
    assert "torch==" in (run_dir / "provenance" / "packages.txt").read_text()

    # The user's own options in the project's conf/: a model and a cluster profile.
    (proj / "conf" / "model" / "wide.yaml").write_text(
        "_target_: proj.model.Net\nin_dim: ${data.in_dim}\nhidden: 96\n"
    )
    shipped = Path(where.stdout.strip()).parent / "conf" / "cluster" / "local.yaml"
    (proj / "conf" / "cluster").mkdir()
    (proj / "conf" / "cluster" / "mine.yaml").write_text(
        shipped.read_text().replace("description: this machine", "description: my laptop")
    )
    clusters = _jzk(env, proj, "clusters")
    assert clusters.returncode == 0, clusters.stderr
    block = clusters.stdout.split("mine: my laptop")[1].split("\n\n")[0]
    assert f"from project {proj / 'conf'}" in block
    validated = _jzk(env, proj, "validate", "cluster=mine", "model=wide")
    assert validated.returncode == 0, validated.stderr
    wide = _jzk(env, proj, "train", "cluster=mine", "model=wide", "train.steps=10")
    assert wide.returncode == 0, wide.stderr[-3000:]
    assert _run_dir(wide.stdout) != run_dir  # another model: another run directory

    # An option that exists nowhere: every option is listed with where it comes from.
    typo = _jzk(env, proj, "train", "model=wid")
    assert typo.returncode == 2
    assert typo.stderr.startswith("jzk train: error: model=wid is not an option")
    assert f"from project {proj / 'conf'}: net, wide" in typo.stderr
    assert "did you mean model=wide?" in typo.stderr
    assert "Traceback" not in typo.stderr

    # Changing the model's code under an existing run: one refusal, no restart spent.
    model_py = proj / "proj" / "model.py"
    model_py.write_text(
        model_py.read_text().replace("nn.Linear(hidden, 1)", "nn.Linear(hidden, 2)")
    )
    changed = _jzk(env, proj, "train", "train.steps=30")
    assert changed.returncode == 2, changed.stderr[-3000:]
    assert changed.stderr.count("the model no longer matches it") == 1
    assert "jzk train: error: cannot resume from" in changed.stderr  # the workers say it too
    assert "layers.2.weight is [2, 64] in the model, [1, 64] in the checkpoint" in changed.stderr
    assert "restarting" not in changed.stderr and "Traceback" not in changed.stderr


def _git(proj: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.org", *args],
        cwd=proj,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def _job_reason(job_id: str, env: dict[str, str]) -> str:
    return run(["squeue", "-h", "-j", job_id, "-o", "%T %r"], env).stdout.strip()


@pytest.mark.slurm
def test_a_project_on_slurm_runs_the_code_it_was_submitted_with(
    slurm, venv: Path, tmp_path: Path
) -> None:
    env = _user_env(venv, tmp_path, slurm)
    assert _jzk(env, tmp_path, "init", "proj").returncode == 0
    proj = tmp_path / "proj"
    _git(proj, "init", "-q")
    _git(proj, "add", "-A")
    _git(proj, "commit", "-q", "-m", "skeleton")
    commit = _git(proj, "rev-parse", "HEAD")
    # An uncommitted change: the provenance must keep it, not drop it.
    data_py = proj / "proj" / "data.py"
    data_py.write_text(data_py.read_text() + "\n# an uncommitted note\n")
    job = ["resources.nodes=1", "resources.gpus_per_node=2", "resources.time=00:05:00"]
    train = ["train.steps=20", "train.log_every=5"]

    # A 3-point sweep from the project's directory: one job array.
    sweep = _jzk(
        env, proj, "train", "-m", "cluster=slurm_local", *job, *train, "optim.lr=0.01,0.003,0.001"
    )
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    records = manifest_records(proj / "multirun" / "proj")
    assert len(records) == 3 and len({r["array_job_id"] for r in records}) == 1

    # A reference: the same training as local workers, with the code as committed.
    ref = _jzk(env, proj, "train", "resources.gpus_per_node=2", *train, "job.name=reference")
    assert ref.returncode == 0, ref.stderr[-3000:]
    reference = _digest(_run_dir(ref.stdout))

    # jzk submit, held in the queue (sbatch --hold) while the model is edited.
    sub = _jzk(env, proj, "submit", "--hold", "cluster=slurm_local", *job, *train, "job.name=held")
    assert sub.returncode == 0, sub.stderr[-3000:]
    job_id = re.search(r"submitted job (\d+)", sub.stdout).group(1)
    held_dir = proj / re.search(r"run dir (\S+)", sub.stdout).group(1)
    assert "JobHeldUser" in _job_reason(job_id, env)
    model_py = proj / "proj" / "model.py"
    model_py.write_text(model_py.read_text().replace("nn.GELU()", "nn.Tanh()"))
    assert run(["scontrol", "release", job_id], env).returncode == 0

    wait_for(records[0]["array_job_id"], env, timeout=300)
    wait_for(job_id, env, timeout=300)
    assert sacct_states(records[0]["array_job_id"], env, expected=3) == ["COMPLETED"] * 3
    assert sacct_states(job_id, env) == ["COMPLETED"], (held_dir / "..").resolve()
    # The held job ran the code of its submission: the model of the unedited reference.
    assert _digest(held_dir) == reference
    # ...and the edit does change the model, so the equality above means something.
    edited = _jzk(env, proj, "train", "resources.gpus_per_node=2", *train, "job.name=edited")
    assert edited.returncode == 0, edited.stderr[-3000:]
    assert _digest(_run_dir(edited.stdout)) != reference

    # Every run directory records its provenance: the commit and the uncommitted diff.
    for run_dir in [held_dir, *(Path(r["run_dir"]) for r in records)]:
        source = json.loads((run_dir / "provenance" / "source.json").read_text())
        assert source["git_commit"] == commit and source["uncommitted_changes"] is True
        assert source["code_dir"].startswith(str(proj / "logs" / "code"))
        diff = (run_dir / "provenance" / "uncommitted.diff").read_text()
        assert "+# an uncommitted note" in diff
        assert "proj/model.py" not in diff  # edited after submission: not this job's code
        history = (run_dir / "provenance" / "history.jsonl").read_text().splitlines()
        assert json.loads(history[-1])["code_dir"] == source["code_dir"]
    # The sweep's points share one snapshot (content-addressed).
    sources = [Path(r["run_dir"]) / "provenance" / "source.json" for r in records]
    assert len({json.loads(p.read_text())["code_dir"] for p in sources}) == 1

    status = _jzk(env, proj, "status")
    assert status.returncode == 0, status.stderr
    # Every run under the project: the submitted job, the sweep's 3 points, and the 2
    # local runs (`jzk status` lists local runs too, each with its own state).
    assert "6 COMPLETED" in status.stdout, status.stdout
