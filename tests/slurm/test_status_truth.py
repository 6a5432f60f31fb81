"""`jzk status` of script runs on the local Slurm cluster says what happened (issue 54
point 6), read by `jzk status --json` as a user would:

- two jobs of one run directory, the first cancelled while it printed, the second done:
  each shows its own last line and state (before: the cancelled one showed the next job's
  `done:` line, the only beat file being the newest job's);
- a run the user's own sbatch ran (`srun jzk train job.entry=...`, no manifest) is that
  Slurm job, COMPLETED, with its start counted (before: `local`, STOPPED, 0 starts).
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from tests.slurm.cluster import (
    JZK,
    PYTHON,
    run,
    sacct_states,
    sbatch,
    submit_script,
    wait_for,
    wait_for_line,
)

pytestmark = pytest.mark.timeout(600)

SCRIPT = textwrap.dedent(
    """
    import sys, time
    epochs = int(sys.argv[sys.argv.index("--epochs") + 1])
    for epoch in range(epochs):
        print(f"epoch {epoch}", flush=True)
        time.sleep(1)
    print(f"done: {epochs} epochs", flush=True)
    """
)


def _status(run_dir: Path, env: dict[str, str]) -> list[dict]:
    shown = run([JZK, "status", "--json", str(run_dir)], env)
    assert shown.returncode == 0, shown.stderr
    return [json.loads(line) for line in shown.stdout.splitlines()]


def test_each_job_of_a_run_directory_shows_its_own_last_line(slurm, tmp_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    (project / "epochs.py").write_text(SCRIPT)
    # --epochs may change: both jobs are one run directory's (job.args_may_change).
    common = ("resources.gpus_per_node=1", "job.entry=epochs.py", "job.args_may_change=[--epochs]")
    first, run_dir, log = submit_script(project, slurm, "truth", *common, "job.args=[--epochs,60]")
    wait_for_line(log, "epoch 1", first, slurm)
    assert run(["scancel", first], slurm).returncode == 0
    wait_for(first, slurm)
    again = run(
        [
            JZK,
            "submit",
            "cluster=slurm_local",
            "job.name=truth",
            f"job.python={PYTHON}",
            *common,
            "job.args=[--epochs,2]",
        ],
        slurm,
        project,
    )
    assert again.returncode == 0, again.stderr
    second = json.loads((run_dir / "manifest.jsonl").read_text().splitlines()[-1])["job_id"]
    wait_for(second, slurm)
    assert sacct_states(second, slurm) == ["COMPLETED"]
    views = {v["job_id"]: v for v in _status(run_dir, slurm)}
    assert views[second]["state"] == "COMPLETED"
    assert views[second]["last_line"] == "done: 2 epochs"
    assert views[first]["state"] == "CANCELLED"
    assert views[first]["last_line"] != "done: 2 epochs"
    # Its own: its beat (replaced by the second job's) or its log (`epoch N`, or srun's
    # and slurmstepd's words on the cancel).
    assert views[first]["last_line"].startswith(("epoch ", "slurmstepd", "srun")), views[first]


def test_a_run_of_the_user_s_own_sbatch_is_its_slurm_job(slurm, tmp_path: Path) -> None:
    project = tmp_path / "own"
    project.mkdir()
    (project / "epochs.py").write_text(SCRIPT)
    run_dir = project / "runs" / "mine"
    batch = project / "mine.sbatch"
    batch.write_text(
        "#!/bin/bash\n#SBATCH --job-name=mine\n#SBATCH --ntasks=1\n"
        f"#SBATCH --output={project}/mine-%j.out\n"
        f"srun {JZK} train resources.gpus_per_node=1 job.entry=epochs.py "
        f"job.args=[--epochs,2] job.run_dir={run_dir}\n"
    )
    job = sbatch(batch, slurm, project)
    wait_for(job, slurm)
    assert sacct_states(job, slurm) == ["COMPLETED"], (project / f"mine-{job}.out").read_text()
    (view,) = _status(run_dir, slurm)
    assert (view["job_id"], view["state"]) == (job, "COMPLETED"), view
    shown = run([JZK, "status", str(run_dir)], slurm).stdout
    assert f"{job} (script, 1 start(s))" in shown, shown
