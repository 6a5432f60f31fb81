"""`jzk remote setup HOST` (laptop mode, docs/remote.md), the login node's side of the
laptop's calls (`jzk remote hello|receive|pack`, run there over ssh), and `--on HOST`:
which commands a laptop runs on a cluster, and how a run's name finds its cluster."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from jeanzay_kit.errors import JzkError

if TYPE_CHECKING:
    from jeanzay_kit.remote.registry import RemoteRun

# Commands that act on a run there: their whole command line goes to the login node.
FORWARDED = ("status", "logs", "cancel", "report", "ckpt")
# Commands that compose a request: validated here, the code sent, then run there.
WITH_CODE = ("submit", "render", "validate", "tune")


def add(sub: argparse._SubParsersAction) -> None:
    remote = sub.add_parser(
        "remote",
        help="laptop mode: prepare a cluster's login node once (`jzk remote setup HOST`)",
        description="From a laptop, over your own OpenSSH (~/.ssh/config, your agent): "
        "`jzk remote setup HOST [OVERRIDES]` makes a venv in cluster.remote.workdir on the "
        "login node and installs this laptop's jeanzay_kit there (built here, sent as a "
        "wheel); then `jzk submit --on HOST ...` and `python train.py -m "
        "hydra.launcher.on=HOST ...` run there. docs/remote.md.",
    )
    rsub = remote.add_subparsers(dest="remote_command", required=True, metavar="ACTION")
    s = rsub.add_parser("setup", help="prepare HOST's login node once (and after an upgrade)")
    s.add_argument("host", metavar="HOST", help="an ~/.ssh/config alias, or user@host[:port]")
    s.add_argument(
        "--download",
        action="store_true",
        help="let pip on the login node download the packages the site's modules lack "
        "(default: none downloaded, the site's torch is used)",
    )
    s.add_argument("--config-dir", default=None, help=argparse.SUPPRESS)
    s.add_argument("overrides", nargs="*", metavar="OVERRIDE", help="e.g. cluster=jeanzay_h100")
    s.set_defaults(run=run_setup)
    s.set_defaults(on=None)
    h = rsub.add_parser("hello", help="(run over ssh by the laptop) what is installed here")
    h.add_argument("--project", default=None)
    h.add_argument("--key", default=None)
    h.set_defaults(run=_run_hello)
    r = rsub.add_parser("receive", help="(run over ssh by the laptop) a code archive on stdin")
    r.add_argument("--project", required=True)
    r.add_argument("--key", required=True)
    r.set_defaults(run=lambda a: _login_side().receive(a.project, a.key))
    p = rsub.add_parser("pack", help="(run over ssh by `jzk pull`) a run's files on stdout")
    p.add_argument("run_dir")
    p.add_argument("--checkpoints", action="store_true")
    p.set_defaults(run=_pack_run)


def _pack_run(args: argparse.Namespace) -> int:
    from jeanzay_kit.remote.login_side import pack_run
    from jeanzay_kit.rundir.run_directory import RunDir

    return pack_run(RunDir.of(args.run_dir), args.checkpoints)


def _login_side() -> ModuleType:
    from jeanzay_kit.remote import login_side

    return login_side


def _run_hello(args: argparse.Namespace) -> int:
    import json

    print(json.dumps(_login_side().hello(args.project, args.key)))
    return 0


def run_setup(args: argparse.Namespace) -> int:
    from jeanzay_kit.cli.common import build_spec
    from jeanzay_kit.remote.laptop import remote_of, setup

    spec = build_spec(args)
    env = dict(os.environ)
    remote = remote_of(spec, args.host, env)
    return setup(remote, spec.cluster.remote_python, env, args.download)


def split_on(argv: Sequence[str]) -> tuple[list[str], str | None]:
    """argv without `--on HOST` (before any `--`), and HOST."""
    argv = list(argv)
    end = argv.index("--") if "--" in argv else len(argv)
    for i, word in enumerate(argv[:end]):
        if word == "--on" and i + 1 < end:
            return argv[:i] + argv[i + 2 :], argv[i + 1]
        if word.startswith("--on="):
            return argv[:i] + argv[i + 1 :], word.split("=", 1)[1]
    return argv, None


def forward(argv: Sequence[str], host: str | None) -> int | None:
    """Run a command that acts on a run on its cluster, when it is a remote one: named by
    `--on HOST`, or by a run name the laptop's registry holds. None: run it here."""
    from jeanzay_kit.remote import registry
    from jeanzay_kit.remote.laptop import remote_known
    from jeanzay_kit.remote.transport import state_dir

    if not argv or argv[0] not in FORWARDED:
        return None
    env = dict(os.environ)
    state = state_dir(env)
    args = list(argv)
    run = None
    for i, word in enumerate(args[1:], start=1):
        if word.startswith("-") or Path(word).exists():
            continue
        run = registry.find_run(state, word)
        if run is not None:
            args[i] = run.run_dir
            break
    if run is None and host is None:
        return None
    remote = remote_known(host if host is not None else run.host if run else "", env)
    if argv[0] == "status" and run is None and len(args) == 1:
        return None  # every remote run of the laptop: cli/status.py asks each host
    out = remote.run(args, capture=False, timeout=None)
    return out.returncode


def check_with_code(command: str, host: str | None) -> None:
    if host is not None and command not in WITH_CODE and command not in FORWARDED:
        raise JzkError(
            f"jzk {command} does not take --on: it runs here. Commands that act on a "
            f"cluster: {', '.join((*WITH_CODE, *FORWARDED, 'pull'))}"
        )


def run_there(args: argparse.Namespace, spec: object) -> int:
    """`jzk submit|render|validate --on HOST ...`, validated here already (the spec):
    the code sent once, then the same command line run in the project's folder there."""
    from jeanzay_kit.cli.common import require_slurm
    from jeanzay_kit.config.spec import JobSpec
    from jeanzay_kit.launch.request import workdir_of
    from jeanzay_kit.remote.laptop import remote_of, ship_code, submit_on

    assert isinstance(spec, JobSpec)
    require_slurm(
        spec,
        f"--on {args.on} needs the profile of that cluster",
        "cluster=<profile> (`jzk clusters`)",
    )
    remote = remote_of(spec, args.on, dict(os.environ))
    root = workdir_of(spec)
    if args.command == "submit":
        return submit_on(remote, spec, root, args.argv)
    project = ship_code(remote, spec, root)
    return remote.run(
        [args.command, *args.argv], cwd=project, capture=False, timeout=None
    ).returncode


def remote_runs_here(host: str | None = None) -> list[RemoteRun]:
    from jeanzay_kit.remote import registry
    from jeanzay_kit.remote.transport import state_dir

    runs = registry.remote_runs(state_dir(dict(os.environ)))
    return [r for r in runs if host is None or r.host == host]


def collect_remote(runs: list[RemoteRun]) -> list[dict[str, object]]:
    """What `jzk status --json` says on each cluster of the laptop's remote runs (a
    sweep: each point), with `host` and `run` (their name here) added: one call per
    host and project there (one squeue and one sacct)."""
    groups: dict[tuple[str, str], list[RemoteRun]] = {}
    for run in runs:
        groups.setdefault((run.host, run.project), []).append(run)
    return [row for (host, project), group in groups.items() for row in _rows(host, project, group)]


def _rows(host: str, project: str, runs: list[RemoteRun]) -> list[dict[str, object]]:
    """What `jzk status --json` says there of these runs (a sweep: each point); a run it
    does not list is UNKNOWN."""
    import json

    from jeanzay_kit.remote.laptop import remote_known

    out = remote_known(host, dict(os.environ)).run(["status", "--json"], cwd=project)
    rows: list[dict[str, object]] = []
    for line in (out.stdout or "").splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        name = _registered_name(str(obj.get("run_dir")), runs) if isinstance(obj, dict) else None
        if name is not None:
            rows.append(obj | {"host": host, "run": name})
    listed = {str(r["run"]).partition("/")[0] for r in rows}
    for run in runs:
        if run.name not in listed:
            job = run.jobs[-1] if run.jobs else "?"
            rows.append({"host": host, "run": run.name, "run_dir": run.run_dir, "job_id": job,
                         "state": "UNKNOWN"})  # fmt: skip
    return rows


def _registered_name(run_dir: str, runs: list[RemoteRun]) -> str | None:
    """A run's name in the laptop's table: a run it submitted, or a point of a sweep it
    launched (`<sweep>/<point>`); None: not one of the laptop's."""
    for run in runs:
        if run_dir == run.run_dir:
            return run.name
        if run_dir.startswith(run.run_dir + "/"):
            return f"{run.name}/{run_dir[len(run.run_dir) + 1 :]}"
    return None
