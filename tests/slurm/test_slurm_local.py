"""The real thing: a local Slurm cluster (scripts/slurm-local), a rendered script, sbatch.

Needs root (daemons, /etc/hosts, device nodes); CI runs as root. The cluster is started
once for the session and stopped at the end.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.slurm.cluster import JZK, REPO, wait_for


@pytest.mark.slurm
@pytest.mark.timeout(300)
def test_rendered_script_runs_ddp_on_two_nodes(slurm, tmp_path: Path) -> None:
    hostile = 'ddp "2x2" #1 $(touch PWNED)'
    overrides = [
        "cluster=slurm_local",
        "resources.nodes=2",
        "resources.gpus_per_node=2",
        "resources.time=00:05:00",
        f"job.name='{hostile}'",
        "train.steps=20",
        "train.log_every=5",
        f"job.python={sys.executable}",
        f"job.entry={REPO / 'train.py'}",
    ]
    subprocess.run(
        [JZK, "render", "-o", str(tmp_path), *overrides],
        check=True,
        capture_output=True,
        timeout=120,
    )
    script = tmp_path / f"{hostile}.sbatch"
    (tmp_path / "logs").mkdir()
    sub = subprocess.run(
        ["sbatch", "--parsable", str(script)],
        cwd=tmp_path,
        env=slurm,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert sub.returncode == 0, sub.stderr
    job_id = sub.stdout.strip().split(";")[0]
    shown = subprocess.run(
        ["scontrol", "show", "job", job_id], env=slurm, capture_output=True, text=True, timeout=30
    ).stdout
    assert f"JobName={hostile}" in shown  # sbatch read the quoted #SBATCH value exactly
    wait_for(job_id, slurm)
    assert not list(tmp_path.rglob("PWNED"))

    out = (tmp_path / "logs" / f"{hostile}-{job_id}.out").read_text()
    err = (tmp_path / "logs" / f"{hostile}-{job_id}.err").read_text()
    assert "done: 20 steps" in out, err[-3000:]
    tasks = re.findall(
        r"jzk: rank (\d)/4 local_rank (\d)/2 node (\d)/2 master (\S+):(\d+) "
        r"launcher srun host (\S+)",
        out,
    )
    assert sorted((int(r), int(lr), int(n), h) for r, lr, n, _, _, h in tasks) == [
        (0, 0, 0, "n1"),
        (1, 1, 0, "n1"),
        (2, 0, 1, "n2"),
        (3, 1, 1, "n2"),
    ]
    assert {(m, int(p)) for _, _, _, m, p, _ in tasks} == {("n1", 10000 + int(job_id) % 22768)}

    # Two Slurm nodes x 2 tasks train exactly what 4 local workers train.
    local = subprocess.run(
        [
            sys.executable,
            "train.py",
            "resources.gpus_per_node=4",
            "train.steps=20",
            "train.log_every=5",
            f"hydra.run.dir={tmp_path / 'local'}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert local.returncode == 0, local.stderr[-2000:]
    slurm_digest = re.search(r"model digest (\w+)", out).group(1)
    assert slurm_digest == (tmp_path / "local" / "model_final.sha256").read_text().strip()
