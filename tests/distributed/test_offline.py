"""Compute nodes without internet (issue 68; docs/offline.md), on this machine: a user's
model that downloads its weights through the real huggingface_hub client (from a local
server standing in for the Hub, HF_ENDPOINT) and its bias through torch.hub's URL
download. `jzk check` on a profile whose nodes are offline runs the model's constructor
in a new network namespace and names each access (URL, library, the user's line),
refusing; `jzk prefetch` fetches them into the caches; then the check passes without the
network, and a training run in a network namespace finds them."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from jeanzay_kit.offline.probe import namespace_works
from tests.helpers import write_files
from tests.hub_server import HUBNET, Hub, hub_files

JZK = str(Path(sys.executable).with_name("jzk"))
# A command in a new network namespace with its loopback up: a node that has no network
# but its own (a process group's rendezvous on 127.0.0.1 works).
OFFLINE = [
    *("unshare", "--net", "--map-root-user", sys.executable, "-c"),
    "import os, sys; from jeanzay_kit.offline.trace import loopback_up; loopback_up(); "
    "os.execv(sys.argv[1], sys.argv[1:])",
]

pytestmark = pytest.mark.skipif(
    not namespace_works(), reason="no network namespace on this machine (unshare --net)"
)

SCRIPT = """
import urllib.request


def vocabulary(url):
    return urllib.request.urlopen(url, timeout=5).read()


print("tokens:", len(vocabulary(URL)))
"""


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    served = Hub(hub_files(tmp_path_factory.mktemp("hub")))
    yield served
    served.stop()


def _env(hub: Hub, caches: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env |= {"HF_ENDPOINT": hub.url, "HF_HOME": str(caches / "hf")}
    env |= {"TORCH_HOME": str(caches / "torch"), "HF_HUB_ETAG_TIMEOUT": "2"}
    return env


def _jzk(cwd: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [JZK, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.timeout(600)
def test_each_access_named_then_prefetched_then_the_run_needs_no_network(
    hub: Hub, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    write_files(project, {"hubnet.py": HUBNET})
    env = _env(hub, tmp_path / "caches")
    request = [
        "cluster=slurm_local",
        "cluster.compute_internet=false",
        "model=custom",
        "model._target_=hubnet.Net",
        f"+model.bias_url={hub.url}/files/bias.pt",
        "loss=criterion",
        "loss.criterion._target_=torch.nn.MSELoss",
    ]
    refused = _jzk(project, env, "check", *request)
    assert refused.returncode == 2, refused.stdout[-2000:] + refused.stderr[-2000:]
    weights = f"{hub.url}/acme/tiny/resolve/main/weights.pt"
    assert f"{weights}  by huggingface_hub, from hubnet.py:13" in refused.stdout, refused.stdout
    assert "cluster.compute_internet:" in refused.stderr and "jzk prefetch" in refused.stderr
    assert not any(k.startswith("GET") and "weights" in k for k in hub.requests), hub.requests

    fetched = _jzk(project, env, "prefetch", *request)
    assert fetched.returncode == 0, fetched.stdout[-2000:] + fetched.stderr[-2000:]
    assert hub.requests["GET /acme/tiny/resolve/main/weights.pt"] == 1, hub.requests
    assert hub.requests["GET /files/bias.pt"] == 1, hub.requests
    assert f"cache HF_HOME={tmp_path / 'caches' / 'hf'}:" in fetched.stdout, fetched.stdout
    before = sum(hub.requests.values())

    passed = _jzk(project, env, "check", *request)
    assert passed.returncode == 0, passed.stdout[-2000:] + passed.stderr[-2000:]
    assert "network: no access (a network namespace)" in passed.stdout, passed.stdout
    # The same overrides trained here, in a network namespace, with the job's switches.
    trained = subprocess.run(
        [*OFFLINE, JZK, "train", *request[2:], "train.steps=3"],
        cwd=project,
        env=env | {"HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert sum(hub.requests.values()) == before, hub.requests  # nothing fetched again


@pytest.mark.timeout(300)
def test_a_script_task_is_checked_the_same_way(hub: Hub, tmp_path: Path) -> None:
    project = tmp_path / "project"
    url = f"{hub.url}/files/vocab.txt"
    write_files(project, {"vocab_job.py": f"URL = {url!r}\n" + SCRIPT})
    env = _env(hub, tmp_path / "caches")
    request = ["cluster=jeanzay_h100", "cluster.account=abc@h100", "job.entry=vocab_job.py"]
    refused = _jzk(project, env, "check", *request, "--budget", "20")
    assert refused.returncode == 2, refused.stdout[-2000:] + refused.stderr[-2000:]
    assert f"{url}  by urllib, from vocab_job.py:7" in refused.stdout, refused.stdout
    allowed = _jzk(project, env, "check", "--allow-network", *request)
    assert allowed.returncode == 0 and url in allowed.stdout, allowed.stderr[-2000:]
