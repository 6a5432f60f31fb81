"""The laptop's record of its clusters and of the runs it submitted there, so `jzk status`,
`logs`, `report`, `cancel` and `pull` find a run by its name, without `--on`.

Two files in the laptop's state folder (remote/transport.py state_dir):
- hosts.json: per host, how to run the toolkit there (work folder, set-up lines), as
  `jzk remote setup` found it;
- runs.jsonl: one line per submission (host, run name, run directory there, job ids).
Edge: files. Written aside and renamed (hosts) or appended a line at a time (runs).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from jeanzay_kit.errors import JzkError


@dataclass(frozen=True)
class RemoteRun:
    host: str
    name: str  # the run directory's name
    run_dir: str  # on the cluster, absolute
    project: str  # the project's folder there, relative to the work folder
    jobs: Sequence[str] = field(default_factory=list)
    log: str = ""
    submitted_at: str = ""


def hosts_file(state: Path) -> Path:
    return state / "hosts.json"


def save_host(state: Path, host: str, workdir: str, setup: Sequence[str]) -> None:
    hosts = read_hosts(state)
    hosts[host] = {"workdir": workdir, "setup": list(setup)}
    state.mkdir(parents=True, exist_ok=True)
    tmp = hosts_file(state).with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(hosts, indent=1, sort_keys=True))
    os.replace(tmp, hosts_file(state))


def read_hosts(state: Path) -> dict[str, dict[str, object]]:
    try:
        data = json.loads(hosts_file(state).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def host_settings(state: Path, host: str) -> tuple[str, list[str]]:
    """The work folder and set-up lines `jzk remote setup HOST` recorded."""
    known = read_hosts(state).get(host)
    if known is None:
        raise JzkError(f"{host} was never set up from this machine. HINT: jzk remote setup {host}")
    return str(known["workdir"]), [str(x) for x in known.get("setup", [])]  # type: ignore[attr-defined]


def runs_file(state: Path) -> Path:
    return state / "runs.jsonl"


def record_run(state: Path, run: RemoteRun) -> None:
    state.mkdir(parents=True, exist_ok=True)
    with runs_file(state).open("a") as out:
        out.write(json.dumps(asdict(run) | {"jobs": list(run.jobs)}) + "\n")


def remote_runs(state: Path) -> list[RemoteRun]:
    """Every submission on record, oldest first; the same run directory submitted again
    keeps its latest line, with every job id."""
    by_dir: dict[tuple[str, str], RemoteRun] = {}
    try:
        lines = runs_file(state).read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        try:
            run = RemoteRun(**json.loads(line))
        except (ValueError, TypeError):
            continue  # a line being written, or from another version
        key = (run.host, run.run_dir)
        if key in by_dir:
            jobs = [*by_dir.pop(key).jobs, *run.jobs]
            run = RemoteRun(**(asdict(run) | {"jobs": list(dict.fromkeys(jobs))}))
        by_dir[key] = run
    return list(by_dir.values())


def find_run(state: Path, target: str) -> RemoteRun | None:
    """The remote run `target` names: its run name, its run directory there, or a job id."""
    bare = target.rstrip("/") or target
    matches = [
        r for r in remote_runs(state) if bare in (r.name, r.run_dir.rstrip("/")) or target in r.jobs
    ]
    if len(matches) > 1:
        hosts = ", ".join(f"{r.host}:{r.run_dir}" for r in matches)
        raise JzkError(
            f"{target} names {len(matches)} remote runs ({hosts}): give the run directory"
        )
    return matches[0] if matches else None
