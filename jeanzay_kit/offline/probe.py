"""Run the run's start in a traced child process (offline/child.py) and read back what it
reached over the network: with the network taken away (a new network namespace where this
machine allows one, else the socket guard), or watched (prefetch: the network on, the
libraries' caches set)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from jeanzay_kit.config.spec import JobSpec
from jeanzay_kit.offline import network_rules as rules
from jeanzay_kit.offline.trace import GUARD, OFFLINE, WATCH
from jeanzay_kit.slurm.offline_env import CACHE_FOLDERS


@dataclass(frozen=True)
class Probe:
    accesses: list[rules.Access]
    returncode: int
    how: str  # "a network namespace", "the socket guard", "the network on"
    timed_out: bool


@cache
def namespace_works() -> bool:
    """A new network namespace can be made here (root, or unprivileged user namespaces)."""
    try:
        done = subprocess.run([*_UNSHARE, "true"], capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


_UNSHARE = ["unshare", "--net", "--map-root-user"]


def what_to_run(spec: JobSpec, overrides: Sequence[str], config_dir: str | None) -> list[str]:
    """The child's WHAT: the user's command for a script task, else `jzk check`'s."""
    if spec.job.runs_script:
        return ["script", spec.job.entry, *spec.job.args]
    return ["check", *(["--config-dir", config_dir] if config_dir else []), *overrides]


def probe(
    what: Sequence[str],
    offline: bool,
    budget_s: float,
    env: Mapping[str, str],
    project: Path,
) -> Probe:
    """Run WHAT traced; the accesses it made (each with its library and user line)."""
    mode = WATCH if not offline else OFFLINE if namespace_works() else GUARD
    how = {WATCH: "the network on", OFFLINE: "a network namespace", GUARD: "the socket guard"}
    with tempfile.TemporaryDirectory(prefix="jzk-net-") as tmp:
        trace_file = Path(tmp) / "trace.jsonl"
        argv = [sys.executable, "-m", "jeanzay_kit.offline.child", "--trace", str(trace_file)]
        argv += ["--mode", mode, "--project", str(project), *what]
        if mode == OFFLINE:
            argv = [*_UNSHARE, *argv]
        code, timed_out = _run(argv, env, project, budget_s)
        found = read_trace(trace_file)
    return Probe(found, code, how[mode], timed_out)


def _run(argv: list[str], env: Mapping[str, str], cwd: Path, budget_s: float) -> tuple[int, bool]:
    """The child's exit code, and whether it was stopped at the budget (a script that
    trains on: its start is what was tried)."""
    child = subprocess.Popen(argv, env=dict(env), cwd=cwd, start_new_session=True)
    try:
        return child.wait(timeout=budget_s), False
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGTERM)
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
        return child.returncode, True
    except KeyboardInterrupt:
        os.killpg(child.pid, signal.SIGKILL)
        raise


def fetched_lines(accesses: Sequence[rules.Access], env: Mapping[str, str]) -> list[str]:
    """What a prefetch reached, and each cache folder's files and size: on Jean Zay the
    files count against an inode quota, not only the bytes (docs/offline.md)."""
    lines = rules.report_lines(accesses, offline=False)
    for name in (n for n, sub in CACHE_FOLDERS.items() if sub):  # XDG: all of them
        folder = Path(env.get(name) or _default_cache(name, env))
        if folder.is_dir():
            files = [p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()]
            size = sum(p.stat().st_size for p in files) / 1e6
            lines.append(f"cache {name}={folder}: {len(files)} files, {size:,.1f} MB")
    return lines


def _default_cache(name: str, env: Mapping[str, str]) -> str:
    """The libraries' own default folders (XDG's ~/.cache below them)."""
    xdg = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME", "~")).expanduser() / ".cache")
    sub = CACHE_FOLDERS[name]
    return f"{xdg}/{sub}" if sub else xdg


def watch_here(project: Path) -> Callable[[], list[str]]:
    """Watch this process's accesses (the network on); the function returned says them."""
    from jeanzay_kit.offline.trace import install

    fd, name = tempfile.mkstemp(prefix="jzk-net-", suffix=".jsonl")
    os.close(fd)
    install(Path(name), WATCH, str(project.resolve()))

    def lines() -> list[str]:
        found = read_trace(Path(name))
        Path(name).unlink(missing_ok=True)
        return rules.report_lines(found, offline=False)

    return lines


def read_trace(path: Path) -> list[rules.Access]:
    if not path.is_file():
        return []
    found = []
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue  # the last line of a child killed mid-write
        frames = [rules.Frame(str(f[0]), int(f[1]), str(f[2]), str(f[3])) for f in row["frames"]]
        found.append(rules.describe(row["host"], row["port"], row["url"], frames))
    return rules.unique(found)
