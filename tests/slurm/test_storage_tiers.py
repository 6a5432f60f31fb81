"""Storage tiers on the local Slurm cluster (issue 71), as tests/distributed/test_storage.py
does them locally: small tmpfs filesystems stand in for Jean Zay's $SCRATCH and $WORK.

- `jzk submit` of a run whose checkpoints would exceed work's file count is refused before
  the queue (no job, nothing written), with a change that passes.
- The run submitted with `checkpoint.dir=$SCRATCH/ckpt` (expanded on the node) ends with
  its newest checkpoint kept on work; scratch is purged; the next job of the run goes on
  from the kept one and ends with the model of the same two runs with nothing purged.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.mounts import small_filesystem
from tests.slurm.cluster import JZK, Reference, jzk_submit, run, sacct_states, wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(540)]

TINY = ("train.log_every=5", "train.eval_every=0", "checkpoint.every_steps=10")
KEEP = ("checkpoint.keep_last=1",)


@pytest.fixture
def tiers(tmp_path: Path) -> Iterator[dict[str, Path]]:
    with ExitStack() as stack:
        yield {
            "scratch": stack.enter_context(small_filesystem(tmp_path / "scratch", 64)),
            # About 60 free inodes: a run's record fits, its checkpoints (4 x 15 files) do not.
            "work": stack.enter_context(small_filesystem(tmp_path / "work", 64, inodes=59)),
        }


def storage(tiers: dict[str, Path]) -> tuple[str, ...]:
    return (
        f"+cluster.storage.scratch={{path:'{tiers['scratch']}',purge_days:30}}",
        f"+cluster.storage.work={{path:'{tiers['work']}',files:500000}}",
    )


def test_submit_refuses_what_work_cannot_hold_and_a_purge_of_scratch_is_survived(
    slurm, tiers, tmp_path: Path
) -> None:
    env = {**slurm, "SCRATCH": str(tiers["scratch"]), "WORK": str(tiers["work"])}
    run_dir = tiers["work"] / "run"
    request = (
        "cluster=slurm_local",
        "resources.gpus_per_node=2",
        *TINY,
        *storage(tiers),
        f"job.run_dir={run_dir}",
    )

    refused = run([JZK, "submit", *request, "train.steps=30"], env, tmp_path)
    assert refused.returncode != 0 and "submitted job" not in refused.stdout, refused.stdout
    assert "does not fit where it writes" in refused.stderr, refused.stderr
    assert "files on work" in refused.stderr and "HINT: checkpoint.dir=" in refused.stderr
    assert not run_dir.exists()  # refused before anything was written

    on_scratch = (*request, *KEEP, "checkpoint.dir=$SCRATCH/ckpt")
    job_id, found_dir, log = jzk_submit(env, tmp_path, *on_scratch, "train.steps=30")
    assert found_dir == run_dir
    # Computed while the job waits in the queue: the same two runs, nothing purged.
    plain = tmp_path / "plain"
    first = Reference([*TINY, *KEEP, "train.steps=30"], plain)
    wait_for(job_id, slurm, timeout=240)
    assert sacct_states(job_id, slurm)[-1] == "COMPLETED", log.read_text()[-2000:]
    link = run_dir / "checkpoints"
    assert link.is_symlink() and Path(os.readlink(link)).is_relative_to(tiers["scratch"])
    assert (run_dir / "kept" / "step-30" / "manifest.json").is_file(), log.read_text()[-2000:]

    for child in tiers["scratch"].iterdir():  # the purge, between two jobs of the run
        shutil.rmtree(child)
    first.digest()
    second = Reference([*TINY, *KEEP, "train.steps=40"], plain)
    job_id, _, log = jzk_submit(env, tmp_path, *on_scratch, "train.steps=40")
    wait_for(job_id, slurm, timeout=240)
    out = log.read_text()
    assert sacct_states(job_id, slurm)[-1] == "COMPLETED", out[-2000:]
    assert "(purged?): step 30 copied back" in out and "(step 30)" in out, out[-2000:]
    assert (run_dir / "model_final.sha256").read_text().strip() == second.digest()
