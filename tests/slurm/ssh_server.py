"""The cluster side of laptop mode, for tests: a real OpenSSH server and a second user.

The laptop is the test process (root, its own ssh client, `ssh -F <config>`); the cluster's
login node is an sshd started here on 127.0.0.1:16822 with its own config and host key,
letting in one account, `jzkremote`, by one key. A command over ssh runs as that user with
SLURM_CONF set by the server (sshd_config's SetEnv, OpenSSH >= 8.7), so sinfo, sbatch and
squeue see the local Slurm cluster (tests/slurm/conftest.py's `slurm`) as on a login node.

The user's home is wiped and set up afresh each session; the server's files, the keys and
the laptop's ssh config live in a 0700 temporary folder removed at the end.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import stat
import subprocess
import sysconfig
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SSHD = Path("/usr/sbin/sshd")
USER = "jzkremote"
HOST = "jzk-test-cluster"
WRONG_KEY_HOST = "jzk-wrong-key"
NO_SERVER_HOST = "jzk-no-server"
PORT = 16822
NO_SERVER_PORT = 16823
START_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class SshCluster:
    """What a test meets: the laptop's ssh config, the remote account, the server's log."""

    host: str  # the ssh config's Host alias of the cluster ("jzk-test-cluster")
    ssh_config: Path  # the laptop's ssh config (`ssh -F`), also JZK_SSH_CONFIG
    user: str  # the remote account ("jzkremote")
    home: Path  # its home on the "cluster"
    work: Path  # home/work, a folder it owns
    log: Path  # sshd's log (LogLevel VERBOSE)
    # The test interpreter's venv purelib, standing for the site's PyTorch module: a venv made
    # with `/usr/bin/python3 -m venv --system-site-packages` and PYTHONPATH=<this> imports
    # torch, hydra and submitit, not jeanzay_kit (its editable .pth is not read from PYTHONPATH).
    site_packages: str

    def laptop_env(self, home: Path) -> dict[str, str]:
        """The environment of a command run on the laptop whose home is `home`."""
        return dict(os.environ, JZK_SSH_CONFIG=str(self.ssh_config), HOME=str(home))

    def remote_profile(self) -> list[str]:
        """The cluster's profile as its user keeps it: the local cluster, the toolkit's
        folder in the work folder, the site's packages as a module would bring them."""
        return [
            "cluster=slurm_local",
            "cluster.remote.workdir='~/work/jzk'",
            "cluster.remote.python=/usr/bin/python3",
            f"cluster.remote.setup=['export PYTHONPATH={self.site_packages}']",
        ]

    def authentications(self) -> int:
        """How many ssh logins of the user the server has accepted so far."""
        try:
            text = self.log.read_text(errors="replace")
        except FileNotFoundError:
            return 0
        return text.count(f"Accepted publickey for {self.user} ")


def why_not_available() -> str | None:
    """The reason this machine cannot play the cluster's login node, or None."""
    if os.geteuid() != 0:
        return "the ssh test server needs root (a second user account, sshd)"
    if not os.access(SSHD, os.X_OK):
        return f"{SSHD} is missing: apt-get install openssh-server (scripts/setup.sh does)"
    return None


def _run(argv: list[str], **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False, **kw)


def _check(argv: list[str], **kw) -> subprocess.CompletedProcess[str]:
    done = _run(argv, **kw)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")
    return done


def ensure_user() -> pwd.struct_passwd:
    """The account, created once (useradd -m), its password field '*' rather than '!'.

    With UsePAM no, sshd refuses an account whose password field starts with '!' (useradd's
    default: "account is locked"), key or not; '*' matches no password and is not locked.
    """
    try:
        pw = pwd.getpwnam(USER)
    except KeyError:
        _check(["useradd", "-m", "-s", "/bin/bash", USER])
        pw = pwd.getpwnam(USER)
    _check(["usermod", "-p", "*", USER])
    return pw


def fresh_home(pw: pwd.struct_passwd, public_key: str) -> tuple[Path, Path]:
    """Empty the user's home, then: 0755 home, ~/.ssh/authorized_keys, ~/work. (home, work)"""
    home = Path(pw.pw_dir)
    if home.resolve() in (Path("/"), Path("/root"), Path("/home")) or not home.is_absolute():
        raise RuntimeError(f"{USER}'s home is {home}: refusing to empty it")
    home.mkdir(parents=True, exist_ok=True)
    for entry in home.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    uid, gid = pw.pw_uid, pw.pw_gid
    os.chown(home, uid, gid)
    home.chmod(0o755)
    ssh_dir = home / ".ssh"
    ssh_dir.mkdir(mode=0o700)
    keys = ssh_dir / "authorized_keys"
    keys.write_text(public_key)
    keys.chmod(0o600)
    work = home / "work"
    work.mkdir()
    for path in (ssh_dir, keys, work):
        os.chown(path, uid, gid)
    ssh_dir.chmod(0o700)
    return home, work


def keygen(path: Path, comment: str) -> str:
    """A new passphrase-less ed25519 key pair at path; its public key."""
    _check(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)])
    return path.with_name(path.name + ".pub").read_text()


def write_sshd_config(tmp: Path, slurm_conf: str) -> Path:
    host_key = tmp / "ssh_host_ed25519_key"
    keygen(host_key, "jzk-test-cluster host key")
    config = tmp / "sshd_config"
    config.write_text(
        f"""\
ListenAddress 127.0.0.1
Port {PORT}
HostKey {host_key}
PidFile {tmp / "sshd.pid"}
LogLevel VERBOSE
AllowUsers {USER}
PermitRootLogin no
PubkeyAuthentication yes
AuthorizedKeysFile .ssh/authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes yes
PrintMotd no
X11Forwarding no
# scp (SFTP protocol since OpenSSH 9.0) and sftp.
Subsystem sftp internal-sftp
# Like a login node's profile: client commands over ssh find the cluster.
SetEnv SLURM_CONF={slurm_conf}
"""
    )
    config.chmod(0o600)
    return config


def write_ssh_config(tmp: Path, key: Path, wrong_key: Path) -> Path:
    """The laptop's ssh config: the cluster, the same with a key it refuses, no server."""

    def block(alias: str, port: int, identity: Path) -> str:
        return f"""\
Host {alias}
    HostName 127.0.0.1
    Port {port}
    User {USER}
    IdentityFile {identity}
    IdentitiesOnly yes
    UserKnownHostsFile {tmp / "known_hosts"}
    StrictHostKeyChecking accept-new
"""

    config = tmp / "ssh_config"
    config.write_text(
        "\n".join(
            (
                block(HOST, PORT, key),
                block(WRONG_KEY_HOST, PORT, wrong_key),
                block(NO_SERVER_HOST, NO_SERVER_PORT, key),
            )
        )
    )
    config.chmod(0o600)
    return config


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _tail(path: Path, chars: int = 2000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except FileNotFoundError:
        return f"({path} was not written)"


def start_sshd(config: Path, log: Path) -> subprocess.Popen[bytes]:
    """sshd in the foreground (-D), logging to `log`, once it accepts connections."""
    if _listening(PORT):
        raise RuntimeError(f"port {PORT} is already in use (a leftover sshd of another session?)")
    # The privilege separation directory (Debian's service unit makes it).
    Path("/run/sshd").mkdir(mode=0o755, parents=True, exist_ok=True)
    check = _run([str(SSHD), "-t", "-f", str(config)])
    if check.returncode != 0:
        raise RuntimeError(f"sshd -t rejects {config}: {check.stderr.strip()}")
    stderr = log.with_name("sshd.stderr")
    with stderr.open("wb") as err:
        proc = subprocess.Popen(
            [str(SSHD), "-D", "-f", str(config), "-E", str(log)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"sshd exited ({proc.returncode}) before listening:\n{_tail(log)}{_tail(stderr)}"
            )
        if _listening(PORT):
            return proc
        time.sleep(0.1)
    stop_sshd(proc)
    raise RuntimeError(
        f"sshd did not listen on 127.0.0.1:{PORT} within {START_TIMEOUT_S:.0f} s:\n"
        f"{_tail(log)}{_tail(stderr)}"
    )


def stop_sshd(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def kill_user_processes() -> None:
    """Whatever the account left running (ssh sessions, job steps of its tests)."""
    _run(["pkill", "-u", USER])


def _allowed(st: os.stat_result, uid: int, gids: set[int], bits: int) -> bool:
    """Whether the mode bits `bits` (an rwx mask at owner position) are granted to uid/gids."""
    if st.st_uid == uid:
        mask = bits
    elif st.st_gid in gids:
        mask = bits >> 3
    else:
        mask = bits >> 6
    return st.st_mode & mask == mask


def blocked(path: str | Path, pw: pwd.struct_passwd, need: str) -> str | None:
    """The first path on the way to `path` the user cannot pass ('x' on each folder above,
    `need` ('r', 'rx', 'rw') on the path itself), said as 'PATH lacks r for USER', or None."""
    gids = set(os.getgrouplist(pw.pw_name, pw.pw_gid))
    target = Path(path)
    chain = [*reversed(target.parents), target]
    for i, p in enumerate(chain):
        want = need if i == len(chain) - 1 else "x"
        bits = sum({"r": stat.S_IRUSR, "w": stat.S_IWUSR, "x": stat.S_IXUSR}[c] for c in want)
        try:
            st = p.stat()
        except OSError as e:
            return f"{p} cannot be read ({e.strerror})"
        if not _allowed(st, pw.pw_uid, gids, bits):
            mode = stat.filemode(st.st_mode)
            return f"{p} ({mode}, owner {st.st_uid}:{st.st_gid}) lacks {want} for {pw.pw_name}"
    return None


def access_problem(
    pw: pwd.struct_passwd, slurm_env: dict[str, str], site_packages: str
) -> str | None:
    """Why the user could not use the site's Python packages or the Slurm cluster, or None."""
    home = pw.pw_dir
    imports = _run(
        [
            "su",
            USER,
            "-c",
            f"PYTHONPATH={site_packages} /usr/bin/python3 -c 'import torch, hydra, submitit'",
        ],
        cwd=home,
    )
    if imports.returncode != 0:
        where = blocked("/usr/bin/python3", pw, "rx") or blocked(site_packages, pw, "rx")
        last = (imports.stderr.strip().splitlines() or ["no output"])[-1]
        return f"{USER} cannot import torch, hydra, submitit from {site_packages}: {where or last}"
    sinfo = _run(["su", USER, "-c", "sinfo -h -o %P"], env=slurm_env, cwd=home)
    if sinfo.returncode != 0:
        conf = Path(slurm_env["SLURM_CONF"])
        munge_socket = conf.parents[1] / "munge" / "munge.socket"
        where = blocked(conf, pw, "r") or blocked(munge_socket, pw, "rw")
        last = (sinfo.stderr.strip().splitlines() or ["no output"])[-1]
        return f"{USER} cannot run sinfo (SLURM_CONF={conf}): {where or last}"
    return None


def purelib() -> str:
    return sysconfig.get_paths()["purelib"]


@contextlib.contextmanager
def serve(slurm_env: dict[str, str]) -> Iterator[SshCluster]:
    """The user, its fresh home, sshd and the laptop's config, for as long as the block runs.

    Raises RuntimeError with a one-line reason (and logs where they help) when something
    cannot be set up; AccessError when the user cannot use the site's packages or Slurm.
    """
    pw = ensure_user()
    kill_user_processes()
    tmp = Path(tempfile.mkdtemp(prefix="jzk-sshd-"))  # 0700, root's
    proc = None
    mounted: Path | None = None
    try:
        laptop_key = tmp / "id_ed25519"
        public = keygen(laptop_key, "the laptop's key")
        wrong_key = tmp / "id_ed25519_wrong"
        keygen(wrong_key, "a key the cluster does not know")
        home, work = fresh_home(pw, public)
        add_association(slurm_env)
        site_packages = purelib()
        if blocked(site_packages, pw, "rx"):
            # The checkout sits under a folder the user cannot cross (CI's, root's home):
            # the packages are shown at a path it can reach, read-only, as a site's module
            # tree is; nothing of the checkout's permissions changes.
            view = tmp.with_name(tmp.name + "-site")
            view.mkdir(mode=0o755)
            view.chmod(0o755)
            mounted = view
            subprocess.run(["mount", "--bind", site_packages, str(view)], check=True)
            subprocess.run(["mount", "-o", "remount,bind,ro", str(view)], check=True)
            site_packages = str(view)
        problem = access_problem(pw, slurm_env, site_packages)
        if problem:
            raise AccessError(problem)
        log = tmp / "sshd.log"
        proc = start_sshd(write_sshd_config(tmp, slurm_env["SLURM_CONF"]), log)
        yield SshCluster(
            host=HOST,
            ssh_config=write_ssh_config(tmp, laptop_key, wrong_key),
            user=USER,
            home=home,
            work=work,
            log=log,
            site_packages=site_packages,
        )
    finally:
        if proc is not None:
            stop_sshd(proc)
        kill_user_processes()
        if mounted is not None:
            subprocess.run(["umount", str(mounted)], capture_output=True, timeout=60)
            mounted.rmdir()
        shutil.rmtree(tmp, ignore_errors=True)


def add_association(slurm_env: dict[str, str]) -> None:
    """The user's Slurm association (the cluster enforces them, as a site does:
    scripts/slurm-local), in root's account, with the QoS the tests use."""
    for argv in (
        ["sacctmgr", "-i", "add", "user", USER, "account=root"],
        ["sacctmgr", "-i", "modify", "user", USER, "set", "qos+=gpu2"],
    ):
        subprocess.run(argv, env=slurm_env, capture_output=True, text=True, timeout=60)


class AccessError(RuntimeError):
    """The user cannot reach what a login node's user would (packages, Slurm)."""
