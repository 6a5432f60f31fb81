"""The timm-style project of tests/distributed/test_timm_layout.py on the local Slurm
cluster (issue 65): `jzk submit` freezes its code only (kilobytes: no data/, no output/),
and the job, stopped by the time-limit signal (SIGUSR1) and then preempted by a job of a
higher partition, resumes the run's own newest checkpoint at every attempt, as locally,
never the project's `output/train/tiny/last.pth.tar` of an earlier plain run."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.distributed.test_timm_layout import (
    ARGS,
    RESUME,
    loaded_epochs,
    make_project,
    project_digests,
)
from tests.slurm.cluster import (
    run,
    sacct_states,
    sbatch,
    submit_script,
    wait_for,
    wait_for_file,
    wait_for_line,
)

pytestmark = pytest.mark.timeout(540)


def test_a_timm_style_script_resumes_its_own_checkpoint_on_slurm(slurm, tmp_path: Path) -> None:
    project = tmp_path / "timm project"
    untouched = make_project(project)
    job_id, run_dir, log = submit_script(
        project,
        slurm,
        "timm",
        "resources.partition=low",
        "resources.nodes=2",
        "resources.gpus_per_node=2",  # 2 tasks x 1 CPU: both nodes full, preemptible
        "job.entry=train.py",
        ARGS.replace("6,", "12,").replace("0.5", "1"),
        RESUME,
    )
    (snapshot,) = (project / "logs" / "code").iterdir()
    frozen = sorted(
        p.relative_to(snapshot).as_posix()
        for p in snapshot.rglob("*")
        if p.is_file() and not p.is_symlink() and ".jzk-provenance" not in p.parts
    )
    assert frozen == ["train.py"]  # the code: no data/, no output/, no pretrained/

    # Rank 0 alone saves: wait for its file, not for a line any rank may print first.
    saves = run_dir / "cwd" / "output" / "train" / "tiny"
    wait_for_file(saves / "checkpoint-2.pth.tar", log, job_id, slurm)
    assert run(["scancel", "--signal=USR1", job_id], slurm).returncode == 0
    wait_for_line(log, "Loaded checkpoint", job_id, slurm, timeout=240)
    wait_for_file(saves / "checkpoint-6.pth.tar", log, job_id, slurm, timeout=240)
    high = tmp_path / "high.sbatch"  # needs both nodes: Slurm preempts the low job
    high.write_text("#!/bin/bash\n#SBATCH -p high -N 2 -n 2 -o /dev/null\nsleep 3\n")
    high_id = sbatch(high, slurm, tmp_path)
    wait_for(high_id, slurm, timeout=120)
    wait_for(job_id, slurm, timeout=300)

    out, err = log.read_text(), log.with_suffix(".err").read_text()
    states = sacct_states(job_id, slurm, duplicates=True)
    # Two stops, each requeued (sacct says REQUEUED or PREEMPTED), then the end.
    assert len(states) == 3 and states[-1] == "COMPLETED", (states, err[-3000:])
    # Each later attempt loaded what the one before saved last (each rank says so), never
    # the project's stale file (epoch 40).
    epochs = sorted(set(loaded_epochs(out)))
    assert len(epochs) == 2 and 2 <= epochs[0] < 6 <= epochs[1] < 11, out[-4000:]
    assert "logs/code" not in out  # no attempt read a frozen copy of the project's file
    saved = torch.load(run_dir / "cwd" / "output" / "train" / "tiny" / "last.pth.tar")
    assert f"Loaded checkpoint 'output/train/tiny/last.pth.tar' (epoch {epochs[1]})" in out
    assert saved["epoch"] == 11
    assert project_digests(project) == untouched  # the project's files untouched
