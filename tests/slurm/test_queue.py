"""The queue read for the user (issue 67), on the local Slurm cluster made busy: a held
job, a dependency that can never be met, a maintenance reservation ahead that a job's
time limit crosses. `jzk status --json` says each one's reason in words, with Slurm's
start estimate; `jzk plan` shows the rows that train the same run, and its shorter row
really starts before the request as asked (both submitted, their states compared)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from tests.slurm.cluster import JZK, PYTHON, REPO, run, sbatch, wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(300)]

TOOLKIT = [f"job.python={PYTHON}", f"job.entry={REPO / 'train.py'}", "job.entry_kind=toolkit"]


def submit(env: dict[str, str], cwd: Path, *argv: str) -> tuple[str, Path]:
    flags = [a for a in argv if a.startswith("--")]
    overrides = [a for a in argv if not a.startswith("--")]
    out = run([JZK, "submit", *flags, "cluster=slurm_local", *overrides, *TOOLKIT], env, cwd)
    assert out.returncode == 0, out.stderr
    job = re.search(r"submitted job (\d+)", out.stdout).group(1)
    run_dir = Path(re.search(r"run dir (.+)$", out.stdout, re.M).group(1))
    return job, cwd / run_dir


def pending_row(env: dict[str, str], run_dir: Path, reason: str, timeout: float = 60) -> dict:
    """`jzk status --json RUN_DIR` once Slurm gives the job `reason`."""
    deadline = time.monotonic() + timeout
    while True:
        out = run([JZK, "status", "--json", str(run_dir)], env)
        assert out.returncode == 0, out.stderr
        (row,) = [json.loads(x) for x in out.stdout.splitlines() if x.startswith("{")]
        if str(row.get("pending_reason") or "").startswith(reason):
            return row
        assert time.monotonic() < deadline, row
        time.sleep(1)


def test_a_held_job_and_a_dependency_never_met_are_said_in_words(slurm, tmp_path: Path) -> None:
    held, held_dir = submit(slurm, tmp_path, "job.name=held", "--hold")
    row = pending_row(slurm, held_dir, "JobHeld")
    assert f"scontrol release {held}" in row["pending_why"], row
    assert row["state"] == "PENDING" and row["start_estimate"] is None

    failing = tmp_path / "fails.sbatch"
    failing.write_text("#!/bin/bash\n#SBATCH -o /dev/null\nexit 3\n")
    first = sbatch(failing, slurm, tmp_path)
    _, after_dir = submit(slurm, tmp_path, "job.name=after", f"job.dependency=afterok:{first}")
    wait_for(first, slurm, timeout=60)
    row = pending_row(slurm, after_dir, "DependencyNeverSatisfied")
    assert "will never start" in row["pending_why"] and f"job {first}" in row["pending_why"], row
    table = run([JZK, "status", str(after_dir)], slurm)
    assert "waits (DependencyNeverSatisfied): " in table.stdout, table.stdout
    run(["scancel", held, row["job_id"]], slurm)


def test_busy_nodes_say_resources_with_slurms_estimate_and_when_it_was_made(
    slurm, tmp_path: Path
) -> None:
    """Both nodes taken by another job (2 minutes long): a job waits for Resources (or
    Priority), and the backfill scheduler's estimate comes with the time it was made."""
    blocker = tmp_path / "blocker.sbatch"
    blocker.write_text("#!/bin/bash\n#SBATCH -N 2 --exclusive -t 2 -o /dev/null\nsleep 100\n")
    busy = sbatch(blocker, slurm, tmp_path)
    queued: list[str] = []
    try:
        job, run_dir = submit(slurm, tmp_path, "job.name=waits", "resources.time=00:05:00")
        deadline = time.monotonic() + 60
        while True:
            row = pending_row(slurm, run_dir, "")
            if row["pending_reason"] in ("Resources", "Priority") and row["start_estimate"]:
                break
            assert time.monotonic() < deadline, row
            time.sleep(1)
        assert f"Slurm's estimate: {row['start_estimate']} (made at " in row["pending_why"], row
        table = run([JZK, "status", str(run_dir)], slurm)
        # Its line under the table (the reason may have moved on since: Resources, Priority).
        assert re.search(rf"job {job} waits \((Resources|Priority)\): ", table.stdout), table.stdout
        # A second one behind it: Priority, with sprio's parts (priority/multifactor).
        queued.append(job)
        second, second_dir = submit(slurm, tmp_path, "job.name=behind", "resources.time=00:05:00")
        queued.append(second)
        row = pending_row(slurm, second_dir, "Priority")
        assert "its priority" in row["pending_why"] and "age" in row["pending_why"], row
    finally:
        run(["scancel", busy, *queued], slurm)


def test_a_qos_limit_per_user_is_said_with_the_limit(slurm, tmp_path: Path) -> None:
    """The QoS gpu2 (scripts/slurm-local) lets a user hold 2 GPUs: a second job of it
    waits for the first (QOSMaxGRESPerUser), said as such."""
    qos = ["resources.qos=gpu2", "resources.time=00:05:00", "train.steps=100000"]
    first, _ = submit(slurm, tmp_path, "job.name=holds", "resources.gpus_per_node=2", *qos)
    queued = [first]
    try:
        second, second_dir = submit(
            slurm, tmp_path, "job.name=capped", "resources.gpus_per_node=1", *qos
        )
        queued.append(second)
        row = pending_row(slurm, second_dir, "QOSMaxGRESPerUser")
        assert "lets one user hold only so many GPUs" in row["pending_why"], row
    finally:
        run(["scancel", *queued], slurm)


def test_a_reservation_ahead_and_the_plans_shorter_row_that_starts_now(
    slurm, tmp_path: Path
) -> None:
    """A maintenance on every node in 40 minutes: a 60-minute job crosses it and waits
    (ReqNodeNotAvail); `jzk plan` offers two chained 30-minute jobs, which Slurm starts
    now. Both submitted: the plan's row runs, the request as asked waits."""
    made = run(
        ["scontrol", "create", "reservation", "reservationname=jzk_maint",
         "starttime=now+40minutes", "duration=30", "nodes=ALL", "users=root",
         "flags=maint,ignore_jobs"],
        slurm,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    try:
        asked = ["job.name=asked", "resources.time=01:00:00", "train.steps=100000"]
        plan = run(
            [JZK, "plan", "cluster=slurm_local", *asked, *TOOLKIT, "--json"], slurm, tmp_path
        )
        assert plan.returncode == 0, plan.stderr
        rows = json.loads(plan.stdout.strip().splitlines()[-1])
        assert rows[0]["label"] == "as asked" and rows[0]["chain"] == 1
        (chained,) = [r for r in rows if r["chain"] == 2]
        assert chained["overrides"] == ["resources.time=00:30:00"]
        # Slurm's estimates: the chained row before the maintenance, the request after it.
        assert chained["start_estimate"] < rows[0]["start_estimate"], rows
        (shorter,) = [r for r in rows if r["overrides"] == ["resources.time_min=00:30:00"]]
        assert all(r["refused"] is None for r in rows), rows

        job, run_dir = submit(slurm, tmp_path, *asked)
        row = pending_row(slurm, run_dir, "ReqNodeNotAvail")
        assert "reservation" in row["pending_why"] and "resources.time" in row["pending_why"]
        replan = run([JZK, "status", "--plan", "--json", str(run_dir)], slurm, tmp_path)
        again = json.loads(replan.stdout.strip().splitlines()[-1])
        assert [r["chain"] for r in again] == [r["chain"] for r in rows], replan.stderr
        applied = run(
            [JZK, "plan", "--apply", str(chained["number"]), "cluster=slurm_local", *asked,
             "job.name=asked2", *TOOLKIT],
            slurm, tmp_path,
        )  # fmt: skip
        assert applied.returncode == 0 and "2 chained" in applied.stdout, applied.stderr
        first = re.search(r"submitted job (\d+)", applied.stdout).group(1)
        chain = re.findall(r"\b(\d+)\b", applied.stdout.split("chained after it", 1)[-1])[:1]
        deadline = time.monotonic() + 60
        while run(["squeue", "-h", "-j", first, "-o", "%T"], slurm).stdout.strip() != "RUNNING":
            assert time.monotonic() < deadline
            time.sleep(1)
        state = run(["squeue", "-h", "-j", job, "-o", "%T"], slurm).stdout.strip()
        assert state == "PENDING"  # the request as asked still waits for the maintenance
        # The time-min row: backfill starts it now, with a limit that ends before it.
        backfilled = run(
            [JZK, "plan", "--apply", str(shorter["number"]), "cluster=slurm_local", *asked,
             "job.name=asked3", *TOOLKIT],
            slurm, tmp_path,
        )  # fmt: skip
        assert backfilled.returncode == 0, backfilled.stderr
        third = re.search(r"submitted job (\d+)", backfilled.stdout).group(1)
        chain.append(third)
        deadline = time.monotonic() + 60
        while run(["squeue", "-h", "-j", third, "-o", "%T"], slurm).stdout.strip() != "RUNNING":
            assert time.monotonic() < deadline, run(["squeue", "-j", third], slurm).stdout
            time.sleep(1)
        limit = run(["squeue", "-h", "-j", third, "-o", "%l"], slurm).stdout.strip()
        assert limit and limit != "1:00:00", limit  # started with less than it asked
        run(["scancel", job, first, *chain], slurm)
    finally:
        run(["scontrol", "delete", "reservation=jzk_maint"], slurm)


def hand_sum(env: dict[str, str], since: str) -> float:
    """This user's GPU hours since `since`, summed here from sacct's own rows."""
    out = run(["sacct", "-X", "-n", "-P", "--duplicates", "-S", since, "-E", "now", "-o",
               "ElapsedRaw,AllocTRES"], env).stdout  # fmt: skip
    total = 0.0
    for line in out.splitlines():
        raw, _, tres = line.partition("|")
        gpus = sum(int(t.split("=")[1]) for t in tres.split(",") if t.startswith("gres/gpu="))
        total += int(raw or 0) * gpus / 3600
    return total


def test_the_allocation_against_sacct_and_a_request_past_it(slurm, tmp_path: Path) -> None:
    """`jzk status --hours` gives the GPU hours sacct holds since the allocation began
    (summed by hand here); a request past what is left is refused before anything is
    written, and submitted with cluster.allocation.go_over=true."""
    since = time.strftime("%Y-%m-%d")
    job, _ = submit(
        slurm, tmp_path, "job.name=spent", "train.steps=20", "resources.gpus_per_node=2"
    )
    wait_for(job, slurm, timeout=120)
    profile = ["cluster=slurm_local", "cluster.allocation.hours=1000",
               f"cluster.allocation.since={since}"]  # fmt: skip
    before = hand_sum(slurm, since)
    hours = run([JZK, "status", "--hours", *profile], slurm, tmp_path)
    after = hand_sum(slurm, since)
    assert hours.returncode == 0, hours.stderr
    used = float(re.search(r"used +([\d,.]+)", hours.stdout).group(1).replace(",", ""))
    assert before > 0 and round(before, 1) - 0.05 <= used <= round(after, 1) + 0.05, hours.stdout
    assert "runs out" in hours.stdout and "burn" in hours.stdout

    tight = ["cluster.allocation.hours=0.001", f"cluster.allocation.since={since}"]
    refused = run([JZK, "submit", "cluster=slurm_local", *tight, "job.name=over", *TOOLKIT],
                  slurm, tmp_path)  # fmt: skip
    assert refused.returncode == 2 and "cluster.allocation.go_over=true" in refused.stderr
    assert not list((tmp_path / "outputs").glob("over-*")), "a refused request wrote its run"
    went, _ = submit(slurm, tmp_path, *tight, "cluster.allocation.go_over=true", "job.name=over")
    run(["scancel", went], slurm)
    # A sweep: all its points together, refused before any is queued.
    sweep = run([PYTHON, str(REPO / "train.py"), "-m", "cluster=slurm_local", *tight,
                 "optim.lr=0.1,0.2", f"job.python={PYTHON}",
                 f"hydra.sweep.dir={tmp_path / 'sweep'}"], slurm, tmp_path)  # fmt: skip
    assert sweep.returncode == 2 and "cluster.allocation.go_over=true" in sweep.stderr, sweep.stderr
    assert not (tmp_path / "sweep" / "manifest.jsonl").exists()
    checked = run([JZK, "validate", "-m", "cluster=slurm_local", *tight, "optim.lr=0.1,0.2"],
                  slurm, tmp_path)  # fmt: skip
    assert checked.returncode == 2 and "takes at most" in checked.stderr, checked.stderr
