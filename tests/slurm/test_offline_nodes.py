"""Compute nodes without internet on the local Slurm cluster (issue 68; docs/offline.md):
the nodes of partition `high` run every job's processes in a network namespace of their
own (the job's interpreter is a wrapper that makes one there: only loopback, as a node cut
from the outside), `debug` keeps the network. A user's model downloads its weights through
the real huggingface_hub client from a local stand-in Hub (HF_ENDPOINT) and its bias
through torch.hub: `jzk submit` refuses it before the queue; `jzk submit --prefetch`
fetches on `debug` (cluster.prefetch_partition), then trains on `high` after it (afterok),
reading only the caches."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from jeanzay_kit.offline.probe import namespace_works
from tests.helpers import write_files
from tests.hub_server import HUBNET, Hub, hub_files
from tests.slurm.cluster import JZK, PYTHON, run, sacct_states, wait_for

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.timeout(400),
    pytest.mark.skipif(not namespace_works(), reason="no network namespace (unshare --net)"),
]

# On partition `high` the interpreter starts in a new network namespace, loopback up.
WRAPPER = """#!/bin/sh
if [ "$SLURM_JOB_PARTITION" = high ]; then
  exec unshare --net --map-root-user {python} -c 'import os, sys
from jeanzay_kit.offline.trace import loopback_up
loopback_up()
os.execv(sys.executable, [sys.executable, *sys.argv[1:]])' "$@"
fi
exec {python} "$@"
"""


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    served = Hub(hub_files(tmp_path_factory.mktemp("hub")))
    yield served
    served.stop()


def test_refused_before_the_queue_then_prefetched_and_trained_offline(
    slurm, hub: Hub, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    python = tmp_path / "node-python"
    write_files(project, {"hubnet.py": HUBNET})
    python.write_text(WRAPPER.format(python=PYTHON))
    python.chmod(0o755)
    caches = tmp_path / "caches"
    env = slurm | {"HF_ENDPOINT": hub.url, "HF_HOME": str(caches / "hf")}
    env |= {"TORCH_HOME": str(caches / "torch"), "HF_HUB_ETAG_TIMEOUT": "2"}
    request = [
        "cluster=slurm_local",
        "cluster.compute_internet=false",
        "cluster.prefetch_partition=debug",
        "resources.partition=high",
        "resources.gpus_per_node=1",
        f"job.python={python}",
        "job.name=offline",
        "model=custom",
        "model._target_=hubnet.Net",
        f"+model.bias_url={hub.url}/files/bias.pt",
        "loss=criterion",
        "loss.criterion._target_=torch.nn.MSELoss",
        "train.steps=20",
    ]
    refused = run([JZK, "submit", *request], env, project, timeout=300)
    assert refused.returncode == 2, refused.stdout[-2000:] + refused.stderr[-2000:]
    assert "cluster.compute_internet: slurm_local's compute nodes have no internet" in (
        refused.stderr
    )
    queue = subprocess.run(["squeue", "-h", "-n", "offline"], env=env, capture_output=True)
    assert queue.stdout.strip() == b"", queue.stdout  # nothing queued

    done = run([JZK, "submit", "--prefetch", *request], env, project, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    prefetch = re.search(r"submitted prefetch job (\d+) on debug", done.stdout).group(1)
    job = re.search(r"submitted job (\d+)", done.stdout).group(1)
    log = project / re.search(r"^  log +(.+)$", done.stdout, re.M).group(1)
    wait_for(job, env, timeout=300)
    assert sacct_states(prefetch, env)[-1] == "COMPLETED"
    assert sacct_states(job, env)[-1] == "COMPLETED", log.read_text()[-3000:]
    # Fetched once, by the prefetch job; the training job read its caches only.
    assert hub.requests["GET /acme/tiny/resolve/main/weights.pt"] == 1, hub.requests
    assert hub.requests["GET /files/bias.pt"] == 1, hub.requests
    fetched = next(project.glob("logs/offline-prefetch-*.out")).read_text()
    assert f"cache HF_HOME={caches / 'hf'}:" in fetched, fetched
    assert "done: 20 steps" in log.read_text(), log.read_text()[-3000:]
    script = (project / re.search(r"^  script +(.+)$", done.stdout, re.M).group(1)).read_text()
    assert f"#SBATCH --dependency=afterok:{prefetch}" in script, script
    assert "export HF_HUB_OFFLINE=1" in script, script
    # The model trained offline is the uninterrupted one: the same request trained here,
    # from the same caches, offline too.
    run_dir = project / re.search(r"run dir (.+)$", done.stdout, re.M).group(1)
    training = [o for o in request if not o.startswith(("cluster", "resources.partition"))]
    here = run(
        [JZK, "train", *training, f"job.run_dir={tmp_path / 'here'}"],
        env | {"HF_HUB_OFFLINE": "1"},
        project,
        timeout=300,
    )
    assert here.returncode == 0, here.stderr[-3000:]
    digest = (run_dir / "model_final.sha256").read_text()
    assert digest == (tmp_path / "here" / "model_final.sha256").read_text()
