"""Your own script on the local Slurm cluster (job.entry, node/script_task.py).

docs/examples/own_script/ddp_script.py, unchanged, submitted with `jzk submit` from a
project folder of its own onto 2 nodes x 2 tasks: it trains with torchrun's variables set
from SLURM's; SIGUSR1 to its tasks makes it save its own checkpoint and exit 3, the job is
requeued (no restart spent) and the script goes on from that checkpoint to the end.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from tests.slurm.cluster import (
    JZK,
    PYTHON,
    REPO,
    manifest_records,
    run,
    sacct_states,
    submit_script,
    sweep_from,
    wait_for,
    wait_for_line,
)

pytestmark = pytest.mark.timeout(600)


def test_an_unchanged_script_trains_on_two_nodes_and_requeues_itself(slurm, tmp_path: Path) -> None:
    project = tmp_path / "my-project"
    shutil.copytree(REPO / "docs" / "examples" / "own_script", project)
    job_id, run_dir, log = submit_script(
        project,
        slurm,
        "own",
        "resources.nodes=2",
        "resources.gpus_per_node=2",
        "job.entry=ddp_script.py",
        "job.args=[--steps,60,--step-seconds,0.2]",
    )
    wait_for_line(log, "step 10 ", job_id, slurm)
    # The time-limit warning, as Slurm sends it to every task of the step.
    signalled = run(["scancel", "--signal=USR1", job_id], slurm)
    assert signalled.returncode == 0, signalled.stderr
    wait_for(job_id, slurm, timeout=300)

    out = log.read_text()
    err = log.with_suffix(".err").read_text()
    assert "requeued job" in err and "no restart spent" in err, err[-3000:]
    at = int(re.search(r"resumed at step (\d+)", out).group(1))
    assert 10 <= at < 60, out[-3000:]
    assert "done: 60 steps" in out, err[-3000:]
    assert (run_dir / "checkpoint.pt").is_file()
    assert sacct_states(job_id, slurm, duplicates=True)[-1] == "COMPLETED"
    # It handles the signal (saves, exits 3): its stop is recorded as one, not as a death
    # of the signal.
    stop = json.loads((run_dir / "endings.jsonl").read_text().splitlines()[0])
    assert stop["kind"] == "stopped" and "stopped on a signal" in stop["evidence"], stop
    assert "does not handle" not in stop["evidence"], stop


# A plain script of a user's (no toolkit import) that prints a few steps, saves, then
# hangs, printing nothing more; started again, it goes on from its save and ends.
STALLS = """import os, time
if os.path.exists("ckpt.txt"):
    print("resumed from", open("ckpt.txt").read(), flush=True)
    raise SystemExit(0)
for step in range(1, 4):
    print(f"step {step}", flush=True)
    time.sleep(0.2)
open("ckpt.txt", "w").write("step 3")
time.sleep(3600)
"""


def test_a_hung_script_of_a_sweep_is_named_ended_and_requeued_from_its_save(
    slurm, tmp_path: Path
) -> None:
    """A sweep's task watches its script as a rendered script's task does: quiet past
    watchdog.stall_seconds, its stacks are dumped and it ends (exit 4) instead of holding
    its node to the time limit (it was a plain subprocess.run). Having saved, it is
    requeued as a rendered script's job is (one of preemption.max_restarts; it was left
    FAILED), and its next start goes on from the save and completes."""
    project = tmp_path / "stalls"
    project.mkdir()
    (project / "stalls.py").write_text(STALLS)
    sweep_dir = tmp_path / "sweep"
    launched = sweep_from(
        project, slurm, sweep_dir,
        "job.entry=stalls.py", "watchdog.stall_seconds=5", "watchdog.heartbeat_seconds=1",
    )  # fmt: skip
    assert launched.returncode == 0, launched.stderr[-3000:]
    (point,) = manifest_records(sweep_dir)
    wait_for(point["job_id"], slurm, timeout=150)  # the limit is an hour
    log = Path(point["log"])
    err = log.with_suffix(".err").read_text()
    assert "the script made no progress for" in err, err[-3000:]
    assert f"hang; requeued job {point['job_id']} (1/3)" in err, err[-3000:]
    assert "resumed from step 3" in log.read_text(), err[-3000:]
    (hang,) = Path(point["run_dir"]).glob("hang-*")
    assert "stalls.py" in (hang / "rank-0.txt").read_text()
    assert sacct_states(point["job_id"], slurm)[-1] == "COMPLETED"
    # Both ends are in the run's record, as a rendered script's job's.
    endings = [json.loads(x) for x in (Path(point["run_dir"]) / "endings.jsonl").open()]
    assert [(e["kind"], e["retried"]) for e in endings][-2:] == [
        ("hang", True), ("completed", None)
    ], endings  # fmt: skip
    shown = run([JZK, "status", str(sweep_dir)], slurm, project).stdout
    assert "COMPLETED" in shown and "2 start(s)" in shown, shown


def test_a_sweep_of_a_session_loop_requeues_and_ends_with_the_straight_digest(
    slurm, tmp_path: Path
) -> None:
    """docs/examples/own_loop/train_session.py (the session API) as the entry of a 2-point
    sweep (1 and 2 tasks, so two arrays), every task a script task under srun. The job's
    settings reach the script's session (config/runtime_settings.py): the time-limit
    signal is USR2, one checkpoint is kept, the watchdog waits 120 s. SIGUSR2 to the
    2-task point after step 10: the session saves, task 0 requeues its array task, and the
    script goes on to the same weights as an uninterrupted local run on 2 workers."""
    project = tmp_path / "my-loop"
    shutil.copytree(REPO / "docs" / "examples" / "own_loop", project)
    args = "job.args=[--steps,40,--step-seconds,0.1]"
    job = ["preemption.signal=USR2", "checkpoint.keep_last=1", "watchdog.stall_seconds=120"]
    straight = run(
        [
            JZK,
            "train",
            "job.entry=train_session.py",
            args,
            *job,
            "resources.gpus_per_node=2",
            f"job.run_dir={tmp_path / 'straight'}",
        ],
        slurm,
        project,
    )
    assert straight.returncode == 0, straight.stderr[-3000:]
    sweep_dir = tmp_path / "sweep"
    launched = run(
        [
            JZK,
            "train",
            "-m",
            "cluster=slurm_local",
            f"job.python={PYTHON}",
            "job.entry=train_session.py",
            args,
            *job,
            "resources.gpus_per_node=1,2",
            f"hydra.sweep.dir={sweep_dir}",
        ],
        slurm,
        project,
    )
    assert launched.returncode == 0, launched.stderr[-3000:]
    one, two = manifest_records(sweep_dir)
    log = Path(two["log"])
    wait_for_line(log, "step 10/40", two["job_id"], slurm)
    signalled = run(["scancel", "--signal=USR2", two["job_id"]], slurm)
    assert signalled.returncode == 0, signalled.stderr
    for record in (one, two):  # two resource shapes: two arrays
        wait_for(record["job_id"], slurm, timeout=300)

    out = log.read_text()
    assert "SIGUSR2 received" in out and "requeued job" in out, out[-3000:]
    first = next(line for line in out.splitlines() if line.startswith("jzk session"))
    for setting in job:
        assert setting.replace("=120", "=120.0") in first, first
    assert "settings" in straight.stdout and "checkpoint.keep_last=1" in straight.stdout
    for run_dir in (Path(two["run_dir"]), tmp_path / "straight"):
        assert [p.name for p in (run_dir / "checkpoints").glob("step-*")] == ["step-40"]
    assert re.search(r"resumed from .*step-\d+ \(step (1\d|[2-3]\d)\)", out), out[-3000:]
    assert (Path(two["run_dir"]) / "model_final.sha256").read_text() == (
        tmp_path / "straight" / "model_final.sha256"
    ).read_text()
    assert sacct_states(two["job_id"], slurm, duplicates=True)[-1] == "COMPLETED"
    assert (Path(one["run_dir"]) / "model_final.sha256").is_file()  # the 1-task point
