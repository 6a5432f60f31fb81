"""One real local Slurm cluster (scripts/slurm-local) for the whole test session.

Needs root (daemons, /etc/hosts, device nodes); CI runs as root. Without root, or when
the cluster cannot start, every Slurm test is skipped with the reason (and the daemons'
logs).

`ssh_cluster` adds the cluster side of laptop mode: an OpenSSH server on 127.0.0.1:16822
letting a second user, jzkremote, in by key, with SLURM_CONF set (tests/slurm/ssh_server.py).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.slurm import ssh_server
from tests.slurm.cluster import SCRIPT


@pytest.fixture(scope="session")
def slurm() -> Iterator[dict[str, str]]:
    """The environment for Slurm client commands (SLURM_CONF set)."""
    if os.geteuid() != 0:
        pytest.skip("the local Slurm cluster needs root (slurmd, /etc/hosts, mknod)")
    # Not under pytest's tmp (/tmp/pytest-of-root is 0700): a second, non-root user (the
    # ssh_cluster fixture's) runs client commands with this SLURM_CONF and needs the munge
    # socket. slurmdbd.conf, which holds the database password, stays 0600 (slurm-local).
    state = Path(tempfile.mkdtemp(prefix="jzk-slurm-", dir="/tmp"))
    state.chmod(0o755)
    up = subprocess.run(
        # First run on a bare machine: apt installs the daemons and MariaDB (~90 s here).
        [str(SCRIPT), "up", str(state)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if up.returncode != 0:
        logs = "\n".join(p.read_text()[-1500:] for p in (state / "log").glob("*.log"))
        # What did start (munge, MariaDB, slurmdbd) goes: it would hold the fixed ports.
        subprocess.run([str(SCRIPT), "down", str(state)], capture_output=True, timeout=60)
        shutil.rmtree(state, ignore_errors=True)
        pytest.skip(f"scripts/slurm-local up failed ({up.returncode}): {up.stderr}\n{logs}")
    env = dict(os.environ, SLURM_CONF=str(state / "etc" / "slurm.conf"))
    try:
        dbd_mode = stat.S_IMODE((state / "etc" / "slurmdbd.conf").stat().st_mode)
        assert dbd_mode == 0o600, f"slurmdbd.conf is {dbd_mode:o}, not 600"
        yield env
    finally:
        subprocess.run([str(SCRIPT), "down", str(state)], capture_output=True, timeout=60)
        shutil.rmtree(state, ignore_errors=True)


@pytest.fixture(autouse=True)
def _nothing_left_in_the_queue(request: pytest.FixtureRequest) -> Iterator[None]:
    """The cluster is shared: a job a test left pending or running (a failed assertion
    before its scancel) would take the nodes from the next test's requeued job, which
    then waits for it. Each test's leftovers are cancelled when it ends."""
    yield
    if "slurm" not in request.fixturenames:
        return
    env = request.getfixturevalue("slurm")
    argv = ["squeue", "-h", "-o", "%i"]
    left = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60).stdout
    if not left.split():
        return
    subprocess.run(["scancel", *left.split()], env=env, capture_output=True, timeout=60)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
        if not done.stdout.split():
            return
        time.sleep(0.5)


@pytest.fixture(scope="session")
def ssh_cluster(slurm: dict[str, str]) -> Iterator[ssh_server.SshCluster]:
    """The cluster seen from a laptop: `ssh -F cluster.ssh_config cluster.host` logs in as
    cluster.user, whose commands see the local Slurm cluster (ssh_server.SshCluster)."""
    reason = ssh_server.why_not_available()
    if reason:
        pytest.skip(reason)
    try:
        with ssh_server.serve(slurm) as cluster:
            yield cluster
    except ssh_server.AccessError as e:
        pytest.fail(str(e), pytrace=False)
    except RuntimeError as e:
        pytest.fail(f"the ssh test server could not start: {e}", pytrace=False)
