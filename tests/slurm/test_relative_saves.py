"""Many runs at once on the local Slurm cluster (issue 41): two experiments of a script
that saves `snapshot.pt` where it stands (PyTorch's DDP tutorial's shape), on 2 nodes
each, side by side: each keeps its own snapshot and none resumes the other's or the one
left in the project; and a job array whose tasks each train into their own run directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.distributed.test_relative_saves import SCRIPT
from tests.slurm.cluster import (
    JZK,
    PYTHON,
    REPO,
    run,
    sacct_states,
    sbatch,
    submit_script,
    wait_for,
    wait_for_file,
)

pytestmark = pytest.mark.timeout(420)


def test_two_experiments_of_a_relative_saving_script_keep_their_own_snapshots(
    slurm, tmp_path: Path
) -> None:
    project = tmp_path / "ddp tutorial"
    project.mkdir()
    (project / "multinode.py").write_text(SCRIPT)
    torch.save(
        {"MODEL_STATE": torch.nn.Linear(8, 1).state_dict(), "EPOCHS_RUN": 3},
        project / "snapshot.pt",
    )
    jobs = {
        batch: submit_script(
            project,
            slurm,
            f"tut{batch}",
            "resources.nodes=2",
            "resources.gpus_per_node=1",
            "job.entry=multinode.py",
            f"job.args=[4,1,--batch_size,{batch}]",
        )
        for batch in (32, 16)
    }
    for batch, (job_id, run_dir, log) in jobs.items():
        wait_for(job_id, slurm, timeout=240)
        out = log.read_text()
        assert sacct_states(job_id, slurm)[-1] == "COMPLETED", log.with_suffix(".err").read_text()
        assert "Resuming" not in out and f"Epoch 0 | Batchsize: {batch}" in out, out
        saved = torch.load(run_dir / "cwd" / "snapshot.pt", weights_only=True)
        assert saved["EPOCHS_RUN"] == 4
        assert (run_dir / "provenance").is_dir()  # a script's run records its code too
    assert torch.load(project / "snapshot.pt", weights_only=True)["EPOCHS_RUN"] == 3


def test_a_rank_that_dies_at_exit_after_a_stop_or_the_work_spends_no_restart(
    slurm, tmp_path: Path
) -> None:
    """Issue 65 point 9: rank 1 of the tutorial aborts at exit (torch 2.13's gloo on a
    loaded node, pytorch/pytorch#190489; here its own atexit handler, deterministic).
    Stopped by the time-limit warning, which the script handles by exiting 3, it aborts:
    the stop's end, requeued as a stop; at the end of its work it aborts again: the job
    completes. Neither spends a restart (the first did, as a crash, before the rule was
    the same as the local launcher's)."""
    project = tmp_path / "at exit"
    project.mkdir()
    stops = (
        "import atexit, os, signal, sys\n"
        "signal.signal(signal.SIGUSR1, lambda *_: sys.exit(3))\n"
        "if os.environ.get('RANK') == '1':\n    atexit.register(os.abort)\n"
    )
    (project / "multinode.py").write_text(stops + SCRIPT)
    job_id, run_dir, log = submit_script(
        project,
        slurm,
        "atexit",
        "resources.nodes=2",
        "resources.gpus_per_node=1",
        "job.entry=multinode.py",
        "job.args=[30,1,--sleep,0.3]",
    )
    wait_for_file(run_dir / "cwd" / "snapshot.pt", log, job_id, slurm, timeout=120)
    assert run(["scancel", "--signal=USR1", job_id], slurm).returncode == 0
    wait_for(job_id, slurm, timeout=240)
    err = log.with_suffix(".err").read_text()
    assert sacct_states(job_id, slurm)[-1] == "COMPLETED", err
    assert "rank 1 died at exit after the stop signal (exit 134)" in err, err
    assert "rank 1 died at exit after the work was done (exit 134)" in err, err
    assert "Resuming training from snapshot" in log.read_text()
    restarts = run_dir / "restarts.json"
    assert not restarts.exists() or json.loads(restarts.read_text())["history"] == [], err
    ends = [json.loads(x) for x in (run_dir / "endings.jsonl").read_text().splitlines()]
    assert ends[0]["kind"] == "stopped" and {e["kind"] for e in ends[1:]} == {"completed"}, ends
    assert any("died at exit" in e["evidence"] for e in ends), ends


def test_each_task_of_a_job_array_trains_into_its_own_run_directory(slurm, tmp_path: Path) -> None:
    project = tmp_path / "arrays"
    project.mkdir()
    rendered = run(
        [
            JZK,
            "render",
            "-o",
            "jobs",
            "--array",
            "0-1",
            "cluster=slurm_local",
            "resources.gpus_per_node=1",
            "train.steps=10",
            "job.name=arr",
            f"job.python={PYTHON}",
            f"job.entry={REPO / 'train.py'}",
            "job.entry_kind=toolkit",
        ],
        slurm,
        project,
    )
    assert rendered.returncode == 0, rendered.stderr
    assert "each array task writes its own run directory: outputs/arr-" in rendered.stderr
    job_id = sbatch(project / "jobs" / "arr.sbatch", slurm, tmp_path)  # from elsewhere
    wait_for(job_id, slurm, timeout=240)
    assert sacct_states(job_id, slurm, expected=2) == ["COMPLETED"] * 2
    (parent,) = (project / "outputs").glob("arr-*")
    digests = set()
    for task in ("0", "1"):
        run_dir = parent / f"task-{task}"
        records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
        assert records[-1]["step"] == 10  # each trained its own 10 steps, none resumed
        assert json.loads((run_dir / "lease.json").read_text())["released"]
        digests.add((run_dir / "model_final.sha256").read_text())
    assert len(digests) == 1  # same config: same model, trained twice, apart
