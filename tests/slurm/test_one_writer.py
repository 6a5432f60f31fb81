"""One writer per run directory on a real Slurm cluster (issue 41 point 1): the same
`jzk submit` twice while the first job trains is refused before the queue, naming the
job; the same script sbatch'ed by hand runs but its rank 0 is refused at start; queued
behind the first with job.dependency=afterany:<id>, the next job takes the run over."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.slurm.cluster import (
    JZK,
    jzk_submit,
    run,
    sacct_states,
    sbatch,
    wait_for,
    wait_for_line,
    wait_until_step,
)

pytestmark = pytest.mark.timeout(420)
LONG = [
    "cluster=slurm_local",
    "resources.nodes=1",
    "resources.gpus_per_node=2",
    "resources.time=00:10:00",
    "train.steps=1000000",
    "checkpoint.every_steps=20",
    # A run that lasts the whole test while hardly using the CPU: its steps wait on the
    # data (50 ms a micro-batch), not on the suite's two cores.
    "data._target_=tests.helpers.SlowRegression",
    "+data.delay=0.05",
    "job.name=owner",
]


def test_a_run_directory_takes_one_job_at_a_time(slurm, tmp_path: Path) -> None:
    project = tmp_path / "my project"
    project.mkdir()
    first, run_dir, log = jzk_submit(slurm, project, *LONG)
    try:
        wait_until_step(run_dir, 20, log, timeout=180)
        snapshots = sorted((project / "logs" / "code").iterdir())

        again = run([*_submit_argv(), *LONG], slurm, project)
        assert again.returncode == 2, again.stdout + again.stderr
        assert f"belongs to Slurm job {first}" in again.stderr
        assert f"job.dependency=afterany:{first}" in again.stderr
        # Refused before anything was written: no new snapshot, no second job recorded.
        assert sorted((project / "logs" / "code").iterdir()) == snapshots
        assert len((run_dir / "manifest.jsonl").read_text().splitlines()) == 1

        # The same script by hand: Slurm runs it, its rank 0 refuses the held directory.
        by_hand = sbatch(run_dir / "job.sbatch", slurm, project)
        wait_for(by_hand, slurm, timeout=120)
        assert sacct_states(by_hand, slurm)[-1] == "FAILED"
        err = (project / "logs" / f"owner-{by_hand}.err").read_text()
        assert f"(Slurm job {first}" in err and "one writer at a time" in err
        lease = json.loads((run_dir / "lease.json").read_text())
        assert lease["job_id"] == first and not lease["released"]

        # Queued behind it: accepted, waits, then resumes the run once the first has ended.
        behind = run([*_submit_argv(), *LONG, f"job.dependency=afterany:{first}"], slurm, project)
        assert behind.returncode == 0, behind.stderr
        second = re.search(r"submitted job (\d+)", behind.stdout).group(1)
        reason = run(["squeue", "-h", "-j", second, "-o", "%r"], slurm).stdout.strip()
        assert reason == "Dependency", reason
        # `jzk cancel JOB_ID` (issue 43): the first job alone; SIGTERM, it saves and ends.
        cancelled = run([JZK, "cancel", first], slurm, project)
        assert cancelled.returncode == 0 and f"cancelled 1 job(s): {first}" in cancelled.stdout
        log2 = project / "logs" / f"owner-{second}.out"
        wait_for_line(log2, "resumed from", second, slurm, timeout=180)
        lease = json.loads((run_dir / "lease.json").read_text())
        assert lease["job_id"] == second
    finally:
        run(["scancel", first], slurm)
        for job in re.findall(r"\d+", run(["squeue", "-h", "-o", "%i"], slurm).stdout):
            run(["scancel", job], slurm)


def _submit_argv() -> list[str]:
    from tests.slurm.cluster import JZK, PYTHON, REPO

    return [
        JZK,
        "submit",
        f"job.python={PYTHON}",
        f"job.entry={REPO / 'train.py'}",
        "job.entry_kind=toolkit",
    ]
