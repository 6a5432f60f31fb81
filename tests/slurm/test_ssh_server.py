"""The laptop-mode test server as a user meets it: ssh in by key, Slurm is there; a wrong
key and a missing server fail the way OpenSSH says so."""

from __future__ import annotations

import subprocess

from tests.slurm.ssh_server import NO_SERVER_HOST, WRONG_KEY_HOST, SshCluster


def ssh(cluster: SshCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ssh", "-F", str(cluster.ssh_config), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_ssh_in_and_see_the_cluster(ssh_cluster: SshCluster) -> None:
    before = ssh_cluster.authentications()
    done = ssh(ssh_cluster, ssh_cluster.host, "echo ok; sinfo -h -o %P")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split()
    assert lines[0] == "ok"
    assert set(lines[1:]) == {"debug*", "high", "low"}, done.stdout
    assert ssh_cluster.authentications() == before + 1

    wrong = ssh(ssh_cluster, "-o", "BatchMode=yes", WRONG_KEY_HOST, "true")
    assert wrong.returncode == 255
    assert "Permission denied" in wrong.stderr, wrong.stderr

    down = ssh(ssh_cluster, "-o", "BatchMode=yes", NO_SERVER_HOST, "true")
    assert down.returncode == 255
    assert "Connection refused" in down.stderr, down.stderr
    assert ssh_cluster.authentications() == before + 1
