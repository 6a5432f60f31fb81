"""Issue 42 points 2-3 on the local cluster: an sbatch option passed through
(job.sbatch_args=--exclude) changes where the job runs, and `jzk submit --chain 2` runs two
jobs of one run one after the other, the second resuming the first (their ids read from
`--parsable`, as a pipeline script reads them: docs/slurm.md)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.slurm.cluster import JZK, PYTHON, REPO, run, sacct_states, wait_for

pytestmark = pytest.mark.timeout(420)


def _submit(project: Path, slurm, *overrides: str, chain: int = 1):
    done = run(
        [
            JZK,
            "submit",
            *(["--chain", str(chain), "--parsable"] if chain > 1 else []),
            "cluster=slurm_local",
            f"job.python={PYTHON}",
            f"job.entry={REPO / 'train.py'}",
            "job.entry_kind=toolkit",
            *overrides,
        ],
        slurm,
        project,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_an_excluded_node_is_not_used_and_a_chain_runs_in_order(slurm, tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    out = _submit(
        project,
        slurm,
        "resources.gpus_per_node=1",
        "train.steps=5",
        "job.name=ex",
        'job.sbatch_args=["--exclude=n1"]',
    )
    job = re.search(r"submitted job (\d+)", out).group(1)
    wait_for(job, slurm, timeout=180)
    nodes = run(["sacct", "-X", "-n", "-P", "-j", job, "-o", "NodeList"], slurm).stdout.split()
    assert sacct_states(job, slurm)[-1] == "COMPLETED" and nodes and "n1" not in nodes[-1]

    out = _submit(
        project, slurm, "resources.gpus_per_node=1", "train.steps=30", "job.name=ch", chain=2
    )
    first, second = out.split()  # --parsable: the ids alone, first to last
    wait_for(second, slurm, timeout=240)
    # slurmdbd hears of each end after squeue: wait until sacct has both (seen: the first
    # still RUNNING there after the second had left the queue).
    sacct_states(f"{first},{second}", slurm, expected=2)
    rows = run(
        ["sacct", "-X", "-n", "-P", "-j", f"{first},{second}", "-o", "JobID,State,Start,End"], slurm
    ).stdout.splitlines()
    times = {r.split("|")[0]: r.split("|") for r in rows}
    assert times[first][1] == times[second][1] == "COMPLETED"
    assert times[second][2] >= times[first][3]  # started once the first had ended
    (run_dir,) = (project / "outputs").glob("ch-*")
    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["step"] == 30
    log2 = (project / "logs" / f"ch-{second}.out").read_text()
    assert "resumed from" in log2 and "step-30" in log2
    manifest = [json.loads(x) for x in (run_dir / "manifest.jsonl").read_text().splitlines()]
    assert [m["job_id"] for m in manifest] == [first, second]
    assert manifest[1]["after"] == first
