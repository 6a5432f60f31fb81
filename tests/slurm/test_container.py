"""Issue 42 point 1 on the local cluster: with job.container.image every task runs inside
the container and the requeue runs outside it. No container runtime installs on these
machines, so tests/slurm/stand_in/singularity stands in for one: it checks the binds and
the image as the runtime would, records what it ran, and runs the task with scontrol,
squeue and sbatch missing, as they are in an image (Lightning#21404). What it cannot show:
a real image's own Python and libraries, GPU libraries bound by --nv (docs/containers.md)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from jeanzay_kit.launch.status import queue_wait
from tests.slurm.cluster import (
    JZK,
    jzk_submit,
    metric_steps,
    run,
    sacct_states,
    wait_for,
    wait_until_step,
)

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(420)]

STAND_IN = Path(__file__).resolve().parent / "stand_in"


def test_every_task_runs_in_the_container_and_the_requeue_runs_outside_it(
    slurm, tmp_path: Path
) -> None:
    project = tmp_path / "my project"  # a space: every bind and path stays one word
    project.mkdir()
    images = tmp_path / "images"
    images.mkdir()
    (images / "pt.sif").write_bytes(b"")
    record = tmp_path / "container.log"
    env = dict(
        slurm,
        PATH=f"{STAND_IN}:{slurm['PATH']}",
        JZK_TEST_IMAGES=str(images),  # expanded on the node, not at submission
        JZK_STAND_IN_RECORD=str(record),
    )
    job, run_dir, log = jzk_submit(
        env,
        project,
        "cluster=slurm_local",
        "job.name=boxed",
        "resources.nodes=2",
        "resources.gpus_per_node=1",
        "train.steps=300",
        "train.log_every=25",
        "checkpoint.every_steps=50",
        "job.container.runtime=singularity",
        "job.container.image=$JZK_TEST_IMAGES/pt.sif",
    )
    assert '"$JZK_TEST_IMAGES/pt.sif"' in (run_dir / "job.sbatch").read_text()
    # `jzk logs -f JOB_ID` from the login node, through the stop and the requeue.
    follow = subprocess.Popen(
        [JZK, "logs", "-f", job], cwd=project, env=env, stdout=subprocess.PIPE, text=True
    )
    wait_until_step(run_dir, 100, log)
    assert run(["scancel", "--signal=USR1", job], env).returncode == 0
    wait_for(job, env, timeout=300)
    followed, _ = follow.communicate(timeout=60)
    assert follow.returncode == 0, followed[-2000:]  # the job's own end: COMPLETED
    assert "jzk: start 1 of job" in followed and "done: 300 steps" in followed

    out = log.read_text()
    states = sacct_states(job, env, duplicates=True)
    assert states[-1] == "COMPLETED" and "REQUEUED" in states, (states, out[-3000:])
    assert f"asked the batch shell to requeue job {job}; it resumes from step-" in out
    assert f"jzk: requeued job {job} (asked from inside the container)" in out
    assert "resumed from" in out and "done: 300 steps" in out
    assert metric_steps(run_dir) == list(range(25, 301, 25))  # each step logged once

    lines = record.read_text().splitlines()
    tasks = [line for line in lines if "train.py" in line]
    # Two attempts x two tasks, one per node, each in the image, with the project bound.
    assert len(tasks) == 4, lines
    assert {re.search(r"host=(\S+)", t).group(1) for t in tasks} == {"n1", "n2"}
    assert {re.search(r"procid=(\S+)", t).group(1) for t in tasks} == {"0", "1"}
    assert all(f"image={images / 'pt.sif'} " in t and str(project) in t for t in tasks)
    # The restart decision after the stopped step ran in the image too; scontrol did not.
    assert any("jeanzay_kit.node.restart_job" in line for line in lines), lines

    # `jzk logs --attempt K`: each start of the requeued job on its own.
    first = run([JZK, "logs", "--attempt", "1", str(run_dir)], env, project).stdout
    second = run([JZK, "logs", "--attempt", "2", str(run_dir)], env, project).stdout
    assert first.startswith(f"jzk: start 1 of job {job}") and "SIGUSR1 received" in first
    assert "done: 300 steps" not in first
    assert second.startswith(f"jzk: start 2 of job {job}") and "done: 300 steps" in second

    # `jzk status --json` (issue 43): one object for the run, its GPU hours those of both
    # attempts as sacct counts them (elapsed seconds x GPUs of each start).
    shown = run([JZK, "status", "--json", str(run_dir)], env, project)
    assert shown.returncode == 0, shown.stderr
    (obj,) = [json.loads(line) for line in shown.stdout.splitlines()]
    assert (obj["job_id"], obj["state"], obj["step"], obj["steps"]) == (job, "COMPLETED", 300, 300)
    rows = run(
        ["sacct", "-X", "-n", "-P", "--duplicates", "-j", job, "-o", "ElapsedRaw,AllocTRES"], env
    ).stdout.splitlines()
    assert len(rows) == 2, rows  # the stopped start and the resumed one
    gpus = [int(re.search(r"gres/gpu=(\d+)", r).group(1)) for r in rows]
    seconds = [int(r.split("|")[0]) for r in rows]
    assert gpus == [2, 2]  # one per node, two nodes
    assert obj["gpu_hours"] == pytest.approx(
        sum(s * g for s, g in zip(seconds, gpus, strict=True)) / 3600
    )
    # `jzk report` states the same hours, per run and in all.
    reported = run([JZK, "report", str(run_dir)], env, project).stdout
    total = re.search(r"^\s+([\d.]+)\s+in all, 1 job\(s\)$", reported, re.M)
    assert total and float(total.group(1)) == pytest.approx(obj["gpu_hours"], abs=0.006), reported

    # The ledger (issue 59): the stop saved, so nothing was trained twice; the queue wait
    # is sacct's Submit to Start of both starts; the start-up that of both starts.
    times = run(
        ["sacct", "-X", "-n", "-P", "--duplicates", "-j", job, "-o", "Submit,Start"], env
    ).stdout.splitlines()
    waits = [queue_wait(*row.split("|")) for row in times]
    lines = [json.loads(x) for x in (run_dir / "starts.jsonl").read_text().splitlines()]
    starts = [s for s in lines if "start_step" in s]  # not the attempts' end lines
    assert len(waits) == 2 and len(starts) == 2, (times, starts)
    assert obj["queue_wait_s"] == pytest.approx(sum(waits))
    assert obj["lost_steps"] == 0 and starts[1]["reached_before"] == starts[1]["start_step"]
    assert obj["startup_s"] == pytest.approx(sum(s["startup_s"] for s in starts), abs=0.1)
    assert 0 < obj["goodput"] < 1
    # jzk report's row of where the hours went: allocated = sacct's hours.
    (row,) = [line for line in reported.splitlines() if line.startswith(str(run_dir))]
    assert float(row[len(str(run_dir)) :].split()[0]) == pytest.approx(
        obj["gpu_hours"], abs=0.006
    ), reported
