"""The connection to a cluster's login node: the user's own `ssh`, one master
connection per host shared by every call (remote/ssh_rules.py says why).

Edge: subprocesses. Every failure of ssh itself becomes one JzkError line
(ssh_rules.ssh_failure); the remote command's own failure is returned to the caller.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from jeanzay_kit.ending.codes import Exit
from jeanzay_kit.errors import JzkError
from jeanzay_kit.remote.ssh_rules import (
    Host,
    control_dir,
    parse_host,
    remote_line,
    shell_line,
    ssh_argv,
    ssh_failure,
)


def state_dir(env: dict[str, str]) -> Path:
    """The laptop's own folder of laptop-mode state: registry of remote runs, sockets."""
    home = Path(env.get("HOME", "~")).expanduser()
    base = env.get("XDG_STATE_HOME") or str(home / ".local" / "state")
    return Path(base) / "jeanzay_kit"


@dataclass
class Remote:
    """How to run the toolkit on one cluster: host, its work folder, its set-up lines."""

    host: Host
    workdir: str  # cluster.remote.workdir, expanded there ($WORK/jzk, ~/jzk)
    setup: Sequence[str] = ()  # module lines and cluster.remote.setup, before every command
    ssh_config: str | None = None  # JZK_SSH_CONFIG: `ssh -F` (else ~/.ssh/config)
    sockets: Path = field(default_factory=lambda: Path("/tmp"))

    @classmethod
    def of(cls, host: str, workdir: str, setup: Sequence[str], env: dict[str, str]) -> Remote:
        try:
            parsed = parse_host(host)
        except ValueError as err:
            raise JzkError(f"--on {err}") from None
        sockets = Path(control_dir(str(state_dir(env)), os.getuid()))
        return cls(parsed, workdir, tuple(setup), env.get("JZK_SSH_CONFIG") or None, sockets)

    def _argv(self, batch: bool = True) -> list[str]:
        self.sockets.mkdir(parents=True, exist_ok=True, mode=0o700)
        return ssh_argv(self.host, str(self.sockets / "%C"), self.ssh_config, batch=batch)

    def connect(self) -> None:
        """Open (or reuse) the master connection: the one authentication of a command. From
        a terminal it may prompt (a password, a second factor); else it never waits."""
        check = subprocess.run(
            [*self._argv(), "-O", "check"], capture_output=True, text=True, timeout=30
        )
        if check.returncode == 0:
            return
        interactive = sys.stdin.isatty()
        opened = subprocess.run(
            [*self._argv(batch=not interactive), "-f", "-N", "-o", "ControlMaster=yes"],
            stdin=None if interactive else subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
        if opened.returncode != 0:
            raise JzkError(
                ssh_failure(self.host.label, 255, opened.stderr)
                or f"ssh to {self.host.label} failed: {opened.stderr.strip()}"
            )

    def run(
        self,
        argv: Sequence[str],
        *,
        cwd: str | None = None,
        stdin: IO[bytes] | None = None,
        capture: bool = True,
        timeout: float | None = 600,
        program: str = "jzk",
    ) -> subprocess.CompletedProcess[str]:
        """`jzk ARGV` (or the venv's `python ARGV`) on the login node, in $JZK_REMOTE/cwd.
        capture=False: its output goes to this terminal as it comes (`logs -f`)."""
        line = remote_line(self.setup, self.workdir, argv, cwd, program)
        return self._call(line, stdin, capture, timeout)

    def shell(
        self, script: str, stdin: IO[bytes] | None = None, timeout: float = 600
    ) -> subprocess.CompletedProcess[str]:
        """A set-up step (jzk not installed there yet): `script` after the set-up lines."""
        return self._call(shell_line(self.setup, self.workdir, script), stdin, True, timeout)

    def _call(
        self, line: str, stdin: IO[bytes] | None, capture: bool, timeout: float | None
    ) -> subprocess.CompletedProcess[str]:
        self.connect()
        out = subprocess.run(
            [*self._argv(), line],
            stdin=stdin if stdin is not None else subprocess.DEVNULL,
            capture_output=capture,
            timeout=timeout,
        )
        stdout, stderr = _text(out.stdout), _text(out.stderr)
        if out.returncode == 255:
            raise self.failure(stderr)
        if out.returncode == Exit.NOT_SET_UP:
            raise self.not_set_up()
        return subprocess.CompletedProcess(out.args, out.returncode, stdout, stderr)

    def failure(self, stderr: str) -> JzkError:
        return JzkError(
            ssh_failure(self.host.label, 255, stderr) or f"ssh to {self.host.label} failed"
        )

    def not_set_up(self) -> JzkError:
        return JzkError(
            f"{self.host.label} is not set up for jzk (no {self.workdir}/venv/bin/jzk there). "
            f"HINT: run `jzk remote setup {self.host.label}` once"
        )

    def pipe_out(self, argv: Sequence[str], sink: IO[bytes], cwd: str | None = None) -> int:
        """`jzk ARGV` there, its standard output (bytes: an archive) written to sink."""
        self.connect()
        line = remote_line(self.setup, self.workdir, argv, cwd)
        proc = subprocess.run(
            [*self._argv(), line], stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.PIPE
        )
        err = _text(proc.stderr)
        if proc.returncode == 255:
            raise self.failure(err)
        if proc.returncode == Exit.NOT_SET_UP:
            raise self.not_set_up()
        if proc.returncode != 0:
            said = err.strip().splitlines()
            raise JzkError(said[-1] if said else f"exit {proc.returncode}")
        return proc.returncode


def _text(data: bytes | None) -> str:
    return (data or b"").decode(errors="replace")


def remote_failure(out: subprocess.CompletedProcess[str], what: str) -> JzkError:
    """The remote jzk's own refusal (its one line), said as this command's."""
    lines = [x for x in (out.stderr or "").strip().splitlines() if x.strip()]
    said = lines[-1] if lines else (out.stdout or "").strip()[-300:] or f"exit {out.returncode}"
    return JzkError(f"{what}: {said.removeprefix('error: ')}")
