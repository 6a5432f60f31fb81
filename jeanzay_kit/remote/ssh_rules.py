"""Laptop mode's pure rules: the ssh command lines, the shell line run on the login node,
and what an ssh failure means for the user. No subprocess, no environment: the edge
(remote/transport.py) passes in what it read.

Why the user's own OpenSSH, as a subprocess: ~/.ssh/config (ProxyJump, IdentityFile,
User, Port) and the agent work unchanged, and one master connection (ControlMaster,
ControlPersist) is shared by every call of a command, so a second factor is asked once.
No port forwarding (IDRIS disables it) and no daemon on the login node.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from jeanzay_kit.ending.codes import Exit

# How long the master connection outlives the last command using it (OpenSSH's
# ControlPersist): the next jzk command within it authenticates no more.
PERSIST = "10m"
# Seconds ssh waits for the TCP connection (ConnectTimeout): an unregistered IP address on
# Jean Zay is dropped silently, so without it ssh would wait for the system's timeout.
CONNECT_TIMEOUT_S = 15
# A unix socket's path is at most 107 characters (sun_path, 108 bytes with its NUL); in
# the folder, OpenSSH writes "/" + %C (40 hex) + "." + 16 random characters while it
# makes the master: 58 after the folder's own name.
MAX_SOCKET_DIR = 107 - 58
# Printed by the login-node side when jzk is not installed there (remote_line).
NOT_SET_UP = "JZK-REMOTE-NOT-SET-UP"


@dataclass(frozen=True)
class Host:
    """Where the cluster is: an ~/.ssh/config alias, or user@host[:port]."""

    name: str  # as ssh takes it: alias, host or user@host
    port: int | None = None

    @property
    def label(self) -> str:
        return self.name if self.port is None else f"{self.name}:{self.port}"


def parse_host(text: str) -> Host:
    """`jean-zay`, `me@jean-zay.idris.fr` or `me@host:2222`; ValueError with the reason."""
    text = text.strip()
    if not text or text.startswith("-") or any(c.isspace() for c in text):
        raise ValueError(f"{text!r} is not a host: give an ~/.ssh/config alias or user@host[:port]")
    name, sep, port = text.rpartition(":")
    if sep and port.isdigit() and name and ":" not in name:
        return Host(name, int(port))
    if text.startswith(":") or text.endswith(":") or text.count(":") > 1:
        raise ValueError(f"{text!r} is not a host: give an ~/.ssh/config alias or user@host[:port]")
    return Host(text)


def ssh_argv(
    host: Host, control_path: str, config: str | None = None, *, batch: bool = True
) -> list[str]:
    """`ssh ...` up to the host, sharing the master connection at control_path.
    batch: no prompt (a command's calls); the master may prompt when a terminal is there."""
    argv = ["ssh"]
    if config:
        argv += ["-F", config]
    argv += [
        "-o", f"ControlPath={control_path}",
        "-o", "ControlMaster=auto",
        "-o", f"ControlPersist={PERSIST}",
        "-o", f"ConnectTimeout={CONNECT_TIMEOUT_S}",
        "-o", "ServerAliveInterval=30",
        "-o", "ClearAllForwardings=yes",  # no forwarding: IDRIS refuses it anyway
    ]  # fmt: skip
    if batch:
        argv += ["-o", "BatchMode=yes"]
    if host.port is not None:
        argv += ["-p", str(host.port)]
    return [*argv, host.name]


def control_dir(state_dir: str, uid: int) -> str:
    """Where the master connections' sockets live: the laptop state folder when its path
    is short enough for a socket, else a private folder under /tmp."""
    own = f"{state_dir.rstrip('/')}/ssh"
    if len(own) <= MAX_SOCKET_DIR:
        return own
    import hashlib

    return f"/tmp/jzk-ssh-{uid}-{hashlib.sha256(state_dir.encode()).hexdigest()[:8]}"


def _shell_path(workdir: str) -> str:
    """The work folder as a double-quoted shell word in which only $VARIABLES expand."""
    if workdir == "~" or workdir.startswith("~/"):
        workdir = "$HOME" + workdir[1:]
    return f'"{workdir}"'


def remote_line(
    setup: Sequence[str],
    workdir: str,
    argv: Sequence[str],
    cwd: str | None = None,
    program: str = "jzk",
) -> str:
    """The one shell line the login node runs: the profile's set-up lines (module loads),
    the work folder as $JZK_REMOTE, and the toolkit's own command from its venv there
    (program: jzk, or python for a user's script). cwd: relative to the work folder.
    `argv` is quoted word by word."""
    parts = [*setup, f"export JZK_REMOTE={_shell_path(workdir)}"]
    missing = f"echo {NOT_SET_UP}; exit {Exit.NOT_SET_UP}"
    parts.append(f'if [ ! -x "$JZK_REMOTE/venv/bin/jzk" ]; then {missing}; fi')
    if cwd is not None:
        parts.append(f'mkdir -p "$JZK_REMOTE"/{shlex.quote(cwd)}')
        parts.append(f'cd "$JZK_REMOTE"/{shlex.quote(cwd)}')
    parts.append(f'exec "$JZK_REMOTE/venv/bin/{program}" {shlex.join(argv)}')
    return "; ".join(parts)


def shell_line(setup: Sequence[str], workdir: str, script: str) -> str:
    """A set-up step's line (before jzk exists there): set-up lines, $JZK_REMOTE, script."""
    return "; ".join([*setup, f"export JZK_REMOTE={_shell_path(workdir)}", script])


def module_lines(purge: bool, modules: Sequence[str], pytorch_module: str | None) -> list[str]:
    """The profile's module lines, as its job scripts load them (on a login node too)."""
    lines = ["module purge"] if purge else []
    wanted = [*modules, *([pytorch_module] if pytorch_module else [])]
    if wanted:
        lines.append("module load " + " ".join(shlex.quote(m) for m in wanted))
    return lines


# (what ssh's stderr says, what it means for the user). ssh exits 255 on its own errors.
_FAILURES = (
    (
        ("Connection timed out", "Operation timed out", "No route to host", "unreachable"),
        "{host} does not answer ({said}). On Jean Zay this is most often a machine whose IP "
        "address is not in IDRIS's filters: register it (account management form, FGC), or "
        "connect through your laboratory's VPN (docs/remote.md)",
    ),
    (
        ("Connection refused",),
        "{host} refuses the connection ({said}): no ssh server listens on that address and "
        "port. HINT: check HostName and Port in ~/.ssh/config, or the user@host:port given",
    ),
    (
        ("Could not resolve hostname", "Name or service not known"),
        "{host} is not a known host name ({said}). HINT: give an alias of ~/.ssh/config or "
        "user@host[:port]",
    ),
    (
        ("Host key verification failed",),
        "{host}'s host key is not the one known ({said}). HINT: check it, then fix "
        "~/.ssh/known_hosts (ssh-keygen -R HOST) and connect once with `ssh {host}`",
    ),
    (
        ("Permission denied", "Too many authentication failures"),
        "{host} refused the login ({said}). HINT: check the key (IdentityFile in "
        "~/.ssh/config, `ssh-add`); a host that asks for a password or a second factor "
        "needs a terminal: run the command from one, it asks once and the connection is "
        "shared for " + PERSIST,
    ),
)


def ssh_failure(host: str, returncode: int, stderr: str) -> str | None:
    """One line for an ssh failure (exit 255), or None when the command itself ran."""
    if returncode != 255:
        return None
    lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
    said = lines[-1] if lines else "no message"
    for needles, text in _FAILURES:
        if any(n in stderr for n in needles):
            return text.format(host=host, said=said)
    if "closed by remote host" in stderr or "Broken pipe" in stderr or "reset by peer" in stderr:
        return (
            f"the connection to {host} was lost ({said}). Nothing is left half-done: run the "
            "same command again, it starts where it stopped"
        )
    return f"ssh to {host} failed ({said})"
