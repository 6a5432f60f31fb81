"""Helpers of the Slurm tests: submit, wait, read states and metrics."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "slurm-local"
PYTHON = sys.executable
JZK = str(Path(sys.executable).parent / "jzk")


def run(argv: list[str], env: dict[str, str], cwd: Path | None = None, timeout: float = 120):
    return subprocess.run(
        argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )


def sbatch(script: Path, env: dict[str, str], cwd: Path) -> str:
    sub = run(["sbatch", "--parsable", str(script)], env, cwd)
    assert sub.returncode == 0, sub.stderr
    return sub.stdout.strip().split(";")[0]


def in_queue(job_id: str, env: dict[str, str]) -> bool:
    """Pending, running, requeued or completing (an array id covers its tasks)."""
    out = run(["squeue", "-h", "-r", "-j", job_id, "-o", "%T"], env).stdout.split()
    return any(s not in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT") for s in out)


def wait_for(job_id: str, env: dict[str, str], timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not in_queue(job_id, env):
            return
        time.sleep(0.25)  # a squeue call is cheap; each wait here ends within a quarter second
    run(["scancel", job_id], env)
    pytest.fail(f"job {job_id} still in the queue after {timeout} s")


ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}


def sacct_states(
    job_id: str, env: dict[str, str], duplicates: bool = False, expected: int = 1
) -> list[str]:
    """Allocation states from sacct; with duplicates, every requeued run too (oldest first).

    slurmctld tells slurmdbd about a job's end asynchronously: a job gone from squeue can
    still read RUNNING in sacct for a moment, and an array's tasks can reach it one by one
    (seen: one record of a 3-task array), so wait (up to 30 s) for `expected` jobs whose
    last record shows an end state."""
    argv = ["sacct", "-X", "-n", "-P", "-j", job_id, "-o", "JobID,State"]
    if duplicates:
        argv.insert(1, "-D")
    deadline = time.monotonic() + 30
    while True:
        rows = [line.split("|") for line in run(argv, env).stdout.splitlines() if "|" in line]
        states = [state.split()[0] if state else "" for _, state in rows]
        last = {jid: state for jid, state in zip([r[0] for r in rows], states, strict=True)}
        done = len(last) >= expected and set(last.values()) <= ENDED
        if done or time.monotonic() > deadline:
            return states
        time.sleep(0.5)


def wait_for_line(
    log: Path, marker: str, job_id: str, env: dict[str, str], timeout: float = 180
) -> None:
    """Until the job's log holds `marker`; fails at once (with both logs) when the job
    has left the queue without printing it, instead of waiting out the timeout."""
    deadline = time.monotonic() + timeout
    while marker not in (log.read_text() if log.exists() else ""):
        if time.monotonic() > deadline or not in_queue(job_id, env):
            err = log.with_suffix(".err")
            text = "".join(p.read_text()[-3000:] for p in (log, err) if p.exists())
            pytest.fail(f"job {job_id} never printed {marker!r}:\n{text or 'no log'}")
        time.sleep(0.5)


def wait_for_file(
    path: Path, log: Path, job_id: str, env: dict[str, str], timeout: float = 180
) -> None:
    """Until `path` exists (a file the job writes: a line in its log may come from a rank
    that does not write it); fails at once when the job has left the queue."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline or not in_queue(job_id, env):
            err = log.with_suffix(".err")
            text = "".join(p.read_text()[-3000:] for p in (log, err) if p.exists())
            pytest.fail(f"job {job_id} never wrote {path}:\n{text or 'no log'}")
        time.sleep(0.5)


def wait_until_step(run_dir: Path, step: int, log: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        steps = metric_steps(run_dir)
        if steps and steps[-1] >= step:
            return
        time.sleep(0.5)
    pytest.fail(f"the job did not reach step {step}: {log.read_text()[-2000:]}")


def jzk_submit(env: dict[str, str], cwd: Path, *overrides: str) -> tuple[str, Path, Path]:
    """`jzk submit OVERRIDES` from `cwd`, running this test's interpreter and the repo's
    train.py; returns (job id, run directory, log) as jzk printed them."""
    sub = run(
        [
            JZK,
            "submit",
            *overrides,
            f"job.python={PYTHON}",
            f"job.entry={REPO / 'train.py'}",
            "job.entry_kind=toolkit",
        ],
        env,
        cwd,
    )
    assert sub.returncode == 0, sub.stderr
    job_id = re.search(r"submitted job (\d+)", sub.stdout).group(1)
    # Whole lines: the project's path may hold spaces.
    run_dir = Path(re.search(r"run dir (.+)$", sub.stdout, re.M).group(1))
    log = Path(re.search(r"^  log +(.+)$", sub.stdout, re.M).group(1))
    return job_id, cwd / run_dir, cwd / log


def metric_steps(run_dir: Path) -> list[int]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    steps = []
    for line in path.read_text().splitlines():
        try:
            steps.append(json.loads(line)["step"])
        except (ValueError, KeyError):
            continue  # a line being written
    return steps


class Reference:
    """The same training run as local workers (no Slurm), started in the background at
    once: a test starts it where it waits on Slurm's clock (a requeued job may not start
    before the credential lifetime, cred_expire, has passed; a lost node is noticed after
    SlurmdTimeout), so the reference computes meanwhile instead of after the job."""

    def __init__(self, overrides: list[str], run_dir: Path) -> None:
        self.run_dir = run_dir
        # Its errors go to a file: a pipe nobody reads while the test waits could fill.
        self._err = run_dir.with_name(run_dir.name + ".err")
        self._err.parent.mkdir(parents=True, exist_ok=True)
        with self._err.open("w") as err:
            self._proc = subprocess.Popen(
                [PYTHON, "train.py", *overrides, f"hydra.run.dir={run_dir}"],
                cwd=REPO,
                stdout=subprocess.DEVNULL,
                stderr=err,
            )

    def digest(self) -> str:
        """Waits for the run; its model digest."""
        code = self._proc.wait(timeout=300)
        assert code == 0, self._err.read_text()[-2000:]
        return (self.run_dir / "model_final.sha256").read_text().strip()


def local_digest(overrides: list[str], run_dir: Path) -> str:
    """The model digest of the same training run as local workers (no Slurm)."""
    return Reference(overrides, run_dir).digest()


def launch_sweep(env: dict[str, str], sweep_dir: Path, *overrides: str):
    """`python train.py -m cluster=slurm_local OVERRIDES` run by this test's interpreter."""
    argv = [PYTHON, "train.py", "-m", "cluster=slurm_local", *overrides]
    return run([*argv, f"job.python={PYTHON}", f"hydra.sweep.dir={sweep_dir}"], env, REPO)


def sweep_from(project: Path, env: dict[str, str], sweep_dir: Path, *overrides: str):
    """`jzk train -m cluster=slurm_local OVERRIDES` from the user's own project folder."""
    argv = [JZK, "train", "-m", "cluster=slurm_local", f"job.python={PYTHON}", *overrides]
    return run([*argv, f"hydra.sweep.dir={sweep_dir}"], env, project)


def manifest_records(directory: Path) -> list[dict]:
    """The lines of DIR/manifest.jsonl, read without the package's own reader."""
    return [json.loads(x) for x in (directory / "manifest.jsonl").read_text().splitlines()]


def submit_script(
    project: Path, env: dict[str, str], name: str, *overrides: str, python: str = PYTHON
) -> tuple[str, Path, Path]:
    """`jzk submit` of a script task onto the local cluster from `project` (job.name
    `name`, this test's interpreter or `python`); returns (job id, run directory, log) as
    the run's manifest records them."""
    sub = run(
        [
            JZK,
            "submit",
            "cluster=slurm_local",
            f"job.name={name}",
            f"job.python={python}",
            *overrides,
        ],
        env,
        project,
    )
    assert sub.returncode == 0, sub.stderr
    (run_dir,) = (project / "outputs").glob(f"{name}-*")
    (record,) = manifest_records(run_dir)
    return record["job_id"], run_dir, Path(record["log"])
