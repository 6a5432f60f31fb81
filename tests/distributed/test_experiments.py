"""Two experiments started one after the other, as a new user does, from a fresh directory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.distributed.conftest import REPO

SHORT = ("train.steps=4", "train.log_every=2", "train.eval_every=0", "resources.gpus_per_node=2")


def train(cwd: Path, *overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "train.py"), *SHORT, *overrides],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=240,
    )


@pytest.mark.timeout(600)
def test_default_run_dirs_separate_experiments_and_keep_a_rerun_together(tmp_path: Path) -> None:
    first = train(tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    # Another model and data set: before, this met the first run's checkpoints in
    # outputs/jzk and was refused after starting its workers.
    other = train(tmp_path, "model=gpt", "data=stdlib_text")
    assert other.returncode == 0, other.stderr[-3000:]
    dirs = sorted(p.name for p in (tmp_path / "outputs").iterdir())
    assert len(dirs) == 2 and all(d.startswith("jzk-") for d in dirs), dirs
    # The same experiment trained longer: same run directory, resumed from its checkpoint.
    longer = train(tmp_path, "train.steps=6")
    assert longer.returncode == 0, longer.stderr[-3000:]
    assert "resumed from" in longer.stdout and "(step 4)" in longer.stdout, longer.stdout
    assert sorted(p.name for p in (tmp_path / "outputs").iterdir()) == dirs


def files_of(run_dir: Path) -> dict[str, bytes]:
    """Every file of a run directory and its bytes: what a command may have rewritten."""
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}


def status_of(run_dir: Path) -> str:
    shown = subprocess.run(
        [str(Path(sys.executable).with_name("jzk")), "status", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    return shown.stdout


@pytest.mark.timeout(300)
def test_a_changed_config_in_a_used_run_dir_is_refused_before_any_worker(tmp_path: Path) -> None:
    run_dir = tmp_path / "shared"
    first = train(tmp_path, f"job.run_dir={run_dir}", "optim.lr=0.003")
    assert first.returncode == 0, first.stderr[-3000:]
    before = files_of(run_dir)
    changed = train(tmp_path, f"job.run_dir={run_dir}", "optim.lr=0.1")
    assert changed.returncode == 2
    assert "jzk: rank" not in changed.stdout  # no worker was started
    assert "Traceback" not in changed.stderr
    err = changed.stderr
    assert f"the config changed since {run_dir}/checkpoints/step-4 was saved" in err, err
    assert "optim.lr: 0.003 -> 0.1" in err
    # The refused command wrote nothing in the run: Hydra's record (which `jzk status`,
    # `jzk report` and the plots' legends read), the lease and the rest are the first's.
    assert "- optim.lr=0.003\n" in (run_dir / ".hydra" / "overrides.yaml").read_text()
    assert files_of(run_dir) == before
    shown = status_of(run_dir)
    assert "optim.lr=0.003" in shown and "optim.lr=0.1" not in shown, shown
    # The way out is named: another run dir, start over, or resume anyway.
    assert "job.run_dir" in err and "resume=never" in err and "allow_config_change" in err
    # Resuming anyway is allowed, and training longer is not a change of config
    # (test_resume.py had a run of its own for these: suite time).
    allowed = train(
        tmp_path,
        f"job.run_dir={run_dir}",
        "optim.lr=0.1",
        "train.steps=6",
        "checkpoint.allow_config_change=true",
    )
    assert allowed.returncode == 0, allowed.stderr[-3000:]
    assert "resumed from" in allowed.stdout and "(step 4)" in allowed.stdout, allowed.stdout
    # resume=never starts over in the same directory (test_resume.py had a run of its own
    # for it: suite time).
    again = train(tmp_path, f"job.run_dir={run_dir}", "optim.lr=0.1", "resume=never")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resumed from" not in again.stdout


def _digest(proc: subprocess.CompletedProcess) -> str:
    return proc.stdout.split("model digest ")[1].split(",")[0]


@pytest.mark.timeout(400)
def test_auto_micro_batch_trains_as_its_choice_and_gpu_switches_keep_the_run(
    tmp_path: Path,
) -> None:
    """micro_batch_size=auto on two CPU ranks: rank 0 chooses (on the CPU: 8 or the
    largest valid size below it), both ranks take it, the run records it and trains as a
    run configured with it; its resume takes the recorded size, and turning the GPU
    defaults off (what a user debugging a run does) keeps the run directory."""
    batch = "train.global_batch_size=36"  # 18 per replica: auto takes 6
    auto = train(tmp_path, "train.micro_batch_size=auto", batch, "job.name=auto")
    assert auto.returncode == 0, auto.stderr[-3000:]
    assert "train.micro_batch_size=auto: 6 on the CPU" in auto.stderr, auto.stderr
    (run_dir,) = (tmp_path / "outputs").glob("auto-*")
    assert '"micro_batch_size": 6' in (run_dir / "micro_batch.json").read_text()
    fixed = train(tmp_path, "train.micro_batch_size=6", batch, "job.name=fixed")
    assert fixed.returncode == 0, fixed.stderr[-3000:]
    assert _digest(auto) == _digest(fixed)
    off = ("train.compile=false", "optim.fused=false", "train.tf32=false")
    longer = train(
        tmp_path, "train.micro_batch_size=auto", batch, "job.name=auto", "train.steps=6", *off
    )
    assert longer.returncode == 0, longer.stderr[-3000:]
    assert "(step 4)" in longer.stdout, longer.stdout
    assert "6, as chosen at the run's start" in longer.stderr, longer.stderr


# A script that writes a file of its own in the run directory, in one process.
TINY_SCRIPT = """
import os
import sys
from pathlib import Path

Path(os.environ["JZK_RUN_DIR"], "out.txt").write_text(" ".join(sys.argv[1:]))
"""


@pytest.mark.timeout(300)
def test_a_script_refused_for_changed_arguments_writes_nothing_in_the_run(
    tmp_path: Path,
) -> None:
    (tmp_path / "tiny.py").write_text(TINY_SCRIPT)
    run_dir = tmp_path / "r"
    command = ("job.entry=tiny.py", f"job.run_dir={run_dir}", "resources.gpus_per_node=1", "--")
    first = train(tmp_path, *command, "--lr=0.003")
    assert first.returncode == 0, first.stderr[-3000:]
    assert (run_dir / "out.txt").read_text() == "--lr=0.003"
    before = files_of(run_dir)
    refused = train(tmp_path, *command, "--lr=0.01")
    assert refused.returncode == 2
    assert "belongs to another command (job.args: '--lr=0.003' -> '--lr=0.01')" in refused.stderr
    # Not Hydra's record, the provenance's history of starts nor the lease: the first's.
    assert "--lr=0.003" in (run_dir / ".hydra" / "overrides.yaml").read_text()
    assert files_of(run_dir) == before
    shown = status_of(run_dir)
    assert "--lr=0.003" in shown and "--lr=0.01" not in shown, shown
