"""parallel.launcher=torchrun on the real local cluster: one task per node, torchrun starts
the workers. Same model as the srun mode (4 local workers), and a preemption signal reaches
every worker through torchrun: saved, requeued, resumed, same model as uninterrupted."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.slurm.cluster import (
    Reference,
    jzk_submit,
    local_digest,
    sacct_states,
    wait_for,
    wait_until_step,
)

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(420)]
TWO_BY_TWO = ["cluster=slurm_local", "resources.nodes=2", "resources.gpus_per_node=2"]


def submit(tmp_path: Path, env: dict[str, str], *overrides: str) -> tuple[str, Path, Path]:
    """`jzk submit` with torchrun on 2 nodes x 2 GPUs; returns (job id, run dir, log)."""
    return jzk_submit(env, tmp_path, *TWO_BY_TWO, "parallel.launcher=torchrun", *overrides)


def workers(out: str) -> list[tuple[int, int, str]]:
    found = re.findall(r"jzk: rank (\d)/4 local_rank (\d)/2 .* launcher torchrun host (\S+)", out)
    return sorted((int(r), int(lr), h) for r, lr, h in found)


# DDP through torchrun is the preemption test's below (its workers, its hosts, the
# 4-worker local model); a case of its own here trained one more job (suite time).
def test_torchrun_trains_the_same_model_as_the_srun_mode(slurm, tmp_path: Path) -> None:
    mode = "parallel=pipeline_ddp"
    training = ["parallel.pipeline_stages=2", "train.steps=6", "train.log_every=1"]
    training += ["train.eval_every=0"]
    job_id, run_dir, log = submit(tmp_path, slurm, mode, "job.name=tr", *training)
    wait_for(job_id, slurm, timeout=240)
    out, err = log.read_text(), log.with_suffix(".err").read_text()
    assert sacct_states(job_id, slurm) == ["COMPLETED"], err[-3000:]
    # One torchrun per node, two workers each: ranks 0-3 over n1 and n2.
    got = workers(out)
    assert [(r, lr) for r, lr, _ in got] == [(0, 0), (1, 1), (2, 0), (3, 1)], out[-3000:]
    assert {h for _, _, h in got} == {"n1", "n2"}
    reference = local_digest([mode, "resources.gpus_per_node=4", *training], tmp_path / "ref")
    assert (run_dir / "model_final.sha256").read_text().strip() == reference


def test_a_preemption_signal_reaches_every_worker_through_torchrun(slurm, tmp_path: Path) -> None:
    training = ["train.steps=400", "train.log_every=10", "checkpoint.every_steps=100"]
    job_id, run_dir, log = submit(tmp_path, slurm, "job.name=trsig", *training)
    wait_until_step(run_dir, 120, log)
    # What Slurm sends before the time limit (--signal=USR1@lead, no B:): every process
    # of the step, torchrun agents included (plain torchrun died of it).
    signalled = subprocess.run(["scancel", "-s", "USR1", job_id], env=slurm, timeout=30)
    assert signalled.returncode == 0
    # Computed while the requeued job waits to start again (cluster.py Reference).
    reference = Reference(["resources.gpus_per_node=4", *training], tmp_path / "ref")
    wait_for(job_id, slurm, timeout=300)
    out, err = log.read_text(), log.with_suffix(".err").read_text()
    assert sacct_states(job_id, slurm, duplicates=True) == ["REQUEUED", "COMPLETED"], err[-3000:]
    saved = re.search(r"SIGUSR1 received: saved step-(\d+)", out)
    assert saved, out[-3000:]
    assert f"resumed from {run_dir / 'checkpoints'}/step-{saved.group(1)}" in out
    assert "User defined signal 1" not in err  # no agent killed by the signal
    # One torchrun per node, two workers each: ranks 0-3 over n1 and n2.
    got = workers(out)
    assert sorted(set((r, lr) for r, lr, _ in got)) == [(0, 0), (1, 1), (2, 0), (3, 1)], got
    assert {h for _, _, h in got} == {"n1", "n2"}, out[-3000:]
    assert "done: 400 steps" in out
    assert (run_dir / "model_final.sha256").read_text().strip() == reference.digest()
