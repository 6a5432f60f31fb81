"""Retries that can help, on the real local cluster (issue 58 points 2, 3 and 6).

A corrupt record ends the job after its first repeat, naming the record; a broken node is
left out of the next attempt.

A script task on one node of the two fails with PyTorch's words for a GPU's uncorrectable
ECC error the first time it runs; the batch script's restart step classifies it (GPU
hardware), requeues the job and leaves that node out (scontrol update ExcNodeList): the
next attempt runs on the other node and completes. Before, the requeued job could start
on the same node again.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.slurm.cluster import JZK, jzk_submit, run, sacct_states, submit_script, wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(600)]

ECC_SCRIPT = """
import os
import sys
from pathlib import Path

first = Path(sys.argv[1])
node = os.environ["SLURMD_NODENAME"]
if not first.exists():
    first.write_text(node)
    print(f"training on {node}", flush=True)
    raise RuntimeError("CUDA error: uncorrectable ECC error encountered")
print(f"second start on {node}; the first was on {first.read_text()}", flush=True)
"""


def test_a_node_with_a_gpu_hardware_error_is_left_out_of_the_requeued_job(
    slurm, tmp_path: Path
) -> None:
    project = tmp_path / "ecc-project"
    project.mkdir()
    (project / "ecc.py").write_text(ECC_SCRIPT)
    first = tmp_path / "first-node.txt"
    job_id, run_dir, log = submit_script(
        project,
        slurm,
        "ecc",
        "resources.nodes=1",
        "resources.gpus_per_node=1",
        "job.entry=ecc.py",
        f"job.args=[{first}]",
    )
    wait_for(job_id, slurm, timeout=300)
    out, err = log.read_text(), log.with_suffix(".err").read_text()
    broken = first.read_text()
    assert f"without node(s) {broken} (ExcNodeList" in err, err[-3000:]
    second = re.search(r"second start on (\S+); the first was on (\S+)", out)
    assert second and second.group(1) != broken, (out[-2000:], err[-2000:])
    states = sacct_states(job_id, slurm, duplicates=True)
    assert states[-1] == "COMPLETED" and "REQUEUED" in states, states
    endings = [json.loads(x) for x in (run_dir / "endings.jsonl").read_text().splitlines()]
    assert (endings[0]["kind"], endings[0]["node"]) == ("gpu_hardware", broken), endings
    shown = run([JZK, "status", str(run_dir), "--json"], slurm, project)
    obj = json.loads(shown.stdout.splitlines()[0])
    assert obj["state"] == "COMPLETED", obj


def test_a_corrupt_record_ends_the_job_after_its_first_repeat(slurm, tmp_path: Path) -> None:
    """A dataset raising on one record past step 0, before the first checkpoint: the job
    is requeued once, the repeat at the same step ends it, FAILED, with the verdict
    (before: requeued preemption.max_restarts=3 times, each from step 0)."""
    project = tmp_path / "corrupt-project"
    project.mkdir()
    job_id, run_dir, log = jzk_submit(
        slurm,
        project,
        "cluster=slurm_local",
        "resources.nodes=1",
        "resources.gpus_per_node=2",
        "job.name=corrupt",
        "data._target_=tests.helpers.CorruptRecord",
        "+data.bad_index=700",
        "train.steps=400",
        "train.eval_every=0",
        "checkpoint.every_steps=1000",
        "preemption.max_restarts=3",
    )
    wait_for(job_id, slurm, timeout=300)
    err = log.with_suffix(".err").read_text()
    assert err.count(f"requeued job {job_id}") == 1, err[-4000:]
    said = [line for line in err.splitlines() if "not restarted" in line]
    assert said, err[-4000:]
    assert "data error at step" in said[-1], said
    assert "ValueError: corrupt record 700 (dataset index 700)" in said[-1], said
    assert "the attempt before failed the same way at the same step" in said[-1], said
    assert sacct_states(job_id, slurm, duplicates=True)[-1] == "FAILED"
    shown = run([JZK, "status", str(run_dir), "--json"], slurm, project)
    obj = json.loads(shown.stdout.splitlines()[0])
    assert obj["verdict"] == "data_error" and "corrupt record 700" in obj["evidence"], obj


# The job's interpreter on its nodes: the first node it starts on has a TMPDIR that takes
# no write (a folder under a regular file: refused even to root), as a node whose local
# disk is full or unmounted would.
BROKEN_TMPDIR_PYTHON = """#!/bin/bash
if [ -n "$SLURMD_NODENAME" ]; then
    [ -s {marker} ] || echo "$SLURMD_NODENAME" > {marker}
    if [ "$(cat {marker})" = "$SLURMD_NODENAME" ]; then export TMPDIR={blocker}/tmp; fi
fi
exec {python} "$@"
"""
RAN_ON = """
import os
import sys

with open(sys.argv[1], "a") as seen:
    seen.write(os.environ["SLURMD_NODENAME"] + "\\n")
print(f"trained on {os.environ['SLURMD_NODENAME']}", flush=True)
"""


def _broken_tmpdir_python(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(the wrapper, the file naming the node it broke, the file under its TMPDIR)."""
    import shlex

    from tests.slurm.cluster import PYTHON

    marker, blocker = tmp_path / "gate-node.txt", tmp_path / "a-file"
    blocker.write_text("not a folder")
    wrapper = tmp_path / "python-on-nodes"
    wrapper.write_text(
        BROKEN_TMPDIR_PYTHON.format(
            marker=shlex.quote(str(marker)), blocker=shlex.quote(str(blocker)), python=PYTHON
        )
    )
    wrapper.chmod(0o755)
    return wrapper, marker, blocker


def test_a_node_failing_the_health_gate_is_left_out_before_any_training(
    slurm, tmp_path: Path
) -> None:
    """Issue 58 point 4: the gate (watchdog.health_gate, on by default) checks every node
    before step 0; the node whose scratch folder takes no write is recorded, left out
    (ExcNodeList) and the job requeued without a restart spent; the script never runs
    there and completes on the other node."""
    project = tmp_path / "gate-project"
    project.mkdir()
    (project / "ran.py").write_text(RAN_ON)
    wrapper, marker, blocker = _broken_tmpdir_python(tmp_path)
    ran = tmp_path / "ran.txt"
    job_id, run_dir, log = submit_script(
        project, slurm, "gate", "resources.nodes=1", "resources.gpus_per_node=1",
        "job.entry=ran.py", f"job.args=[{ran}]", python=str(wrapper),
    )  # fmt: skip
    wait_for(job_id, slurm, timeout=300)
    err = log.with_suffix(".err").read_text()
    broken = marker.read_text().strip()
    said = f"jzk: health gate: 1 of 1 node(s) failed: {broken}: TMPDIR: {blocker}/tmp cannot"
    assert said in err and "Not a directory; requeued job" in err, err[-3000:]
    assert f"before any training (no restart spent), without node(s) {broken}" in err, err
    assert "jzk: health gate: 1 node(s) fine in" in err, err[-3000:]
    (trained,) = ran.read_text().split()  # once, on the other node
    assert trained != broken, trained
    states = sacct_states(job_id, slurm, duplicates=True)
    assert states[-1] == "COMPLETED" and "REQUEUED" in states, states
    first = json.loads((run_dir / "endings.jsonl").read_text().splitlines()[0])
    assert (first["kind"], first["node"], first["retried"]) == ("unhealthy_node", broken, True)
    assert not (run_dir / "restarts.json").exists()


def test_a_sweeps_array_task_on_a_node_failing_the_gate_is_requeued_without_it(
    slurm, tmp_path: Path
) -> None:
    """The same gate in the batch script submitit writes for a sweep (`python train.py
    -m` on the jeanzay launcher: its `setup` lines, the point's run directory picked by
    SLURM_ARRAY_TASK_ID): the array task is requeued without the broken node and the
    point completes on the other one (before, sweeps had no gate)."""
    from tests.slurm.cluster import PYTHON, REPO, manifest_records

    wrapper, marker, _ = _broken_tmpdir_python(tmp_path)
    sweep_dir = tmp_path / "sweep"
    launched = run(
        [PYTHON, "train.py", "-m", "cluster=slurm_local", "resources.nodes=1",
         "resources.gpus_per_node=1", "train.steps=4", "optim.lr=0.01,0.003",
         f"job.python={wrapper}", f"hydra.sweep.dir={sweep_dir}"],
        slurm, REPO, timeout=180,
    )  # fmt: skip
    assert launched.returncode == 0, launched.stderr[-3000:]
    records = manifest_records(sweep_dir)
    wait_for(records[0]["array_job_id"], slurm, timeout=300)
    broken = marker.read_text().strip()
    gated = []
    for rec in records:
        run_dir = Path(rec["run_dir"])
        states = sacct_states(rec["job_id"], slurm, duplicates=True)
        assert states[-1] == "COMPLETED" and (run_dir / "result.json").exists(), states
        endings = run_dir / "endings.jsonl"
        if endings.exists():
            first = json.loads(endings.read_text().splitlines()[0])
            assert (first["kind"], first["node"]) == ("unhealthy_node", broken), first
            assert "REQUEUED" in states, states
            gated.append(rec["num"])
    assert gated, "no array task met the broken node"
