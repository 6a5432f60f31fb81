"""A broken node left out of the next attempt, on the real local cluster (issue 58 point 3).

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

from tests.slurm.cluster import JZK, run, sacct_states, submit_script, wait_for

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
