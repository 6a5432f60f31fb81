"""A PyTorch Lightning script with Lightning's Slurm handling left on, under `jzk submit`
on 2 nodes x 2 tasks of the local Slurm cluster (the real `lightning` package: the
`frameworks` extra).

docs/examples/lightning_script/train_lightning.py, unchanged, from a project folder of its
own. SIGUSR1 (the time-limit warning) reaches each process once; Lightning's handler
saves one HPC checkpoint and requeues the job itself; the toolkit sees the job ending
(SIGTERM to the batch shell) and requeues nothing more: one requeue. When Lightning's
handler deadlocks instead (it runs a collective inside the handler, and the signal reaches
the two nodes at different points of a step), the toolkit's watch ends the attempt half
the lead after the signal and requeues it: one requeue still. The job starts again from
Lightning's checkpoint and completes. Repeated (JZK_LIGHTNING_REPEATS, 1 by default to
keep the suite short).
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from tests.slurm.cluster import (
    JZK,
    REPO,
    run,
    sacct_states,
    submit_script,
    wait_for,
    wait_for_line,
)

pytest.importorskip("lightning")
pytestmark = pytest.mark.timeout(600)
REPEATS = int(os.environ.get("JZK_LIGHTNING_REPEATS", "1"))


@pytest.mark.parametrize("repeat", range(REPEATS))
def test_a_lightning_script_saves_once_is_requeued_once_and_resumes(
    slurm, tmp_path: Path, repeat: int
) -> None:
    project = tmp_path / "my-lightning"
    shutil.copytree(REPO / "docs" / "examples" / "lightning_script", project)
    job_id, run_dir, log = submit_script(
        project,
        slurm,
        "lit",
        "resources.nodes=2",
        "resources.gpus_per_node=2",
        "job.entry=train_lightning.py",
        "job.args=[--max_steps,70,--step_seconds,0.1]",
        "preemption.lead_seconds=40",
    )
    wait_for_line(log, "step 20 ", job_id, slurm, timeout=300)
    assert run(["scancel", "--signal=USR1", job_id], slurm).returncode == 0
    wait_for(job_id, slurm, timeout=400)

    out, err = log.read_text(), log.with_suffix(".err").read_text()
    both = out + err
    states = sacct_states(job_id, slurm, duplicates=True)
    assert states.count("REQUEUED") == 1 and states[-1] == "COMPLETED", (states, err[-3000:])
    # Either Lightning requeued the job (the toolkit requeued nothing: its lines are
    # "requeued job N" and "jzk: hang ..."), or Lightning's handler deadlocked (its
    # save_checkpoint barrier on the ranks that ran it while the others were in DDP's
    # all-reduce, where a Python handler cannot run: the signal reaches nodes at different
    # points of a step) and the toolkit's watch ended it 20 s after the signal and requeued
    # it. One requeue either way; rank 0 wrote hpc_ckpt_1 only if it was among the ranks
    # in the handler, else the next attempt resumes from the newest last.ckpt.
    rank0_saved = True
    if "requeued job" in err:
        assert "after the stop signal" in err and "jzk: hang; requeued job" in err, err[-3000:]
        (hang,) = run_dir.glob("hang-*")
        stacks = {p.name: p.read_text() for p in hang.glob("rank-*.txt")}
        assert any("_slurm_sigusr_handler_fn" in text for text in stacks.values()), stacks
        rank0_saved = "_slurm_sigusr_handler_fn" in stacks["rank-0.txt"]
    saved = sorted(p.name for p in run_dir.glob("hpc_ckpt_*.ckpt"))
    assert saved == (["hpc_ckpt_1.ckpt"] if rank0_saved else []), saved  # one save at most
    source = r"hpc_ckpt_1\.ckpt" if rank0_saved else r"last\.ckpt"
    restored = rf"Restoring states from the checkpoint path at \S*{source}"
    assert re.search(restored, both), both[-3000:]
    assert "done: 70 steps" in out, both[-3000:]
    # What `jzk status` can say of a script without its help: two starts, one restart,
    # its newest checkpoint-looking file and its last line.
    shown = run([JZK, "status", str(run_dir)], slurm, project)
    assert shown.returncode == 0, shown.stderr
    assert f"{job_id} (script, 2 start(s)): last line" in shown.stdout, shown.stdout
    assert re.search(r"\.ckpt \(\S+ ago\)", shown.stdout), shown.stdout
