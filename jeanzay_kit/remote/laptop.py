"""Laptop mode, the laptop's side: set a cluster up once, submit there, and find the runs
again. Every call goes through one ssh master connection (remote/transport.py); the
request is composed and validated here first, so a mistake costs no connection.

What runs where (docs/remote.md): the laptop composes, validates, packs the code and
keeps a registry of its remote runs; the login node runs the toolkit from its own venv
in the work folder (cluster.remote.workdir) and submits; compute nodes run what the
login node prepared, and never need the laptop.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from jeanzay_kit.config.spec import JobSpec
from jeanzay_kit.errors import JzkError
from jeanzay_kit.remote import registry
from jeanzay_kit.remote.code_archive import pack, project_name
from jeanzay_kit.remote.ssh_rules import module_lines
from jeanzay_kit.remote.transport import Remote, remote_failure, state_dir


def setup_lines(spec: JobSpec) -> list[str]:
    """What runs on the login node before every command: the profile's modules (when the
    site has `module`), then cluster.remote.setup."""
    c = spec.cluster
    modules = module_lines(c.module_purge, c.modules, c.pytorch_module)
    guarded = [f"if command -v module >/dev/null 2>&1; then {line}; fi" for line in modules]
    return [*guarded, *c.remote_setup]


def remote_of(spec: JobSpec, host: str, env: dict[str, str]) -> Remote:
    return Remote.of(host, spec.cluster.remote_workdir, setup_lines(spec), env)


def remote_known(host: str, env: dict[str, str]) -> Remote:
    """A host `jzk remote setup` prepared from this machine (commands with no config)."""
    workdir, setup = registry.host_settings(state_dir(env), host)
    return Remote.of(host, workdir, setup, env)


# -- jzk remote setup ------------------------------------------------------------------


def build_wheel(out: Path) -> Path:
    """The laptop's own jeanzay_kit as a wheel, built from its source tree in a copy (the
    checkout is left as it is). Sent to the login node, so it needs no package index."""
    import jeanzay_kit

    source = Path(jeanzay_kit.__file__).resolve().parents[1]
    if not (source / "pyproject.toml").is_file():
        raise JzkError(
            f"jeanzay_kit here is not installed from a source checkout ({source}): laptop "
            "mode sends the laptop's own build. HINT: pip install -e <your clone of jeanzay_kit>"
        )
    tree = out / "src"
    tree.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md"):
        if (source / name).is_file():
            shutil.copy2(source / name, tree / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for package in ("jeanzay_kit", "hydra_plugins"):
        if (source / package).is_dir():
            shutil.copytree(source / package, tree / package, ignore=ignore)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--disable-pip-version-check", "-q", "-w", str(out / "wheel"), str(tree)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    wheels = list((out / "wheel").glob("jeanzay_kit-*.whl"))
    if built.returncode != 0 or not wheels:
        raise JzkError(f"building the jeanzay_kit wheel failed: {built.stderr.strip()[-500:]}")
    return wheels[0]


def setup(remote: Remote, python: str, env: dict[str, str], download: bool) -> int:
    """Prepare the login node once: the venv in the work folder over the site's Python
    (its modules' torch through --system-site-packages), the laptop's build installed
    there; then say, one line each, what was checked."""
    from jeanzay_kit.remote.login_side import build_id

    remote.connect()
    print(f"jzk remote setup {remote.host.label}: the work folder is {remote.workdir}")
    with tempfile.TemporaryDirectory(prefix="jzk-wheel-") as tmp:
        wheel = build_wheel(Path(tmp))
        with wheel.open("rb") as data:
            sent = remote.shell(
                'mkdir -p "$JZK_REMOTE/wheels" && cat > "$JZK_REMOTE/wheels/.incoming" && '
                f'mv "$JZK_REMOTE/wheels/.incoming" "$JZK_REMOTE/wheels/{wheel.name}"',
                stdin=data,
            )
        if sent.returncode != 0:
            raise remote_failure(sent, f"sending {wheel.name} to {remote.host.label}")
        print(f"  sent {wheel.name} ({wheel.stat().st_size} bytes)")
    index = "" if download else "--no-index "
    pip = '"$JZK_REMOTE/venv/bin/python" -m pip install -q --disable-pip-version-check'
    made = remote.shell(
        f'if [ ! -x "$JZK_REMOTE/venv/bin/python" ]; then {python} -m venv '
        '--system-site-packages "$JZK_REMOTE/venv" || exit 4; fi; '
        f'{pip} --no-deps --force-reinstall "$JZK_REMOTE/wheels/{wheel.name}" || exit 5; '
        f'{pip} {index}"$JZK_REMOTE/wheels/{wheel.name}" || exit 6',
        timeout=900,
    )
    _say_install(made, remote, python, download)
    info = hello(remote)
    print(f"  jeanzay_kit {info['version']} importable there ({info['python']})")
    missing = list(info.get("slurm_missing") or [])  # type: ignore[call-overload]
    if missing:
        print(f"  Slurm commands missing there: {' '.join(missing)} (is this the login node?)")
    else:
        print("  Slurm commands present there (sbatch, squeue, sacct, scancel)")
    if info["build"] != build_id():
        raise JzkError(
            f"{remote.host.label} runs another build of jeanzay_kit than this laptop after setup"
        )
    print(f"  build {info['build']}: the same as this laptop's")
    registry.save_host(state_dir(env), remote.host.label, remote.workdir, remote.setup)
    return 0 if not missing else 1


def _say_install(
    made: subprocess.CompletedProcess[str], remote: Remote, python: str, download: bool
) -> None:
    if made.returncode == 0:
        print(f"  venv {remote.workdir}/venv ready (over {python}, with the site's packages)")
        return
    said = (made.stderr or made.stdout).strip().splitlines()
    last = said[-1] if said else f"exit {made.returncode}"
    if made.returncode == 4:
        raise JzkError(
            f"{python} -m venv failed on {remote.host.label} ({last}). HINT: set "
            "cluster.remote.python, or a module line in cluster.remote.setup"
        )
    if made.returncode == 6 and not download:
        raise JzkError(
            f"a package jeanzay_kit needs is missing on {remote.host.label} ({last}). HINT: load "
            "the site's PyTorch (cluster.pytorch_module, or a line in cluster.remote.setup), or "
            f"let pip download what is missing: jzk remote setup {remote.host.label} --download"
        )
    raise JzkError(f"installing jeanzay_kit on {remote.host.label} failed ({last})")


def hello(remote: Remote, project: str | None = None, key: str | None = None) -> dict[str, object]:
    argv = ["remote", "hello", *(["--project", project, "--key", key] if project and key else [])]
    out = remote.run(argv, timeout=120)
    if out.returncode != 0:
        raise remote_failure(out, f"jzk on {remote.host.label}")
    try:
        return dict(json.loads(out.stdout.strip().splitlines()[-1]))
    except (ValueError, IndexError):
        raise JzkError(f"jzk on {remote.host.label} answered {out.stdout[-200:]!r}") from None


def same_build(remote: Remote, info: dict[str, object]) -> None:
    from jeanzay_kit.remote.login_side import build_id

    if info.get("build") != build_id():
        raise JzkError(
            f"{remote.host.label} runs jeanzay_kit {info.get('version')} build "
            f"{info.get('build')}, this laptop build {build_id()}: they must be the same. "
            "HINT: jzk remote setup "
            f"{remote.host.label}"
        )


# -- jzk submit --on -------------------------------------------------------------------


def ship_code(remote: Remote, spec: JobSpec, root: Path) -> str:
    """Send the project's code (what a submission freezes) unless the login node has this
    very code already; returns the project's folder there, relative to the work folder."""
    from jeanzay_kit.project.job_code import snapshot_rules
    from jeanzay_kit.project.snapshot import plan_of

    plan, _source = plan_of(root.resolve(), snapshot_rules(spec))
    archive = pack(root.resolve(), plan.frozen)
    project = project_name(root)
    info = hello(remote, project, archive.key)
    same_build(remote, info)
    where = f"projects/{project}"
    if info.get("has_code"):
        print(
            f"code: {archive.files} files, already on {remote.host.label} ({archive.key})",
            file=sys.stderr,
        )
        return where
    with tempfile.TemporaryFile() as data:
        data.write(archive.data)
        data.seek(0)
        got = remote.run(
            ["remote", "receive", "--project", project, "--key", archive.key], stdin=data
        )
    if got.returncode != 0:
        raise remote_failure(got, f"sending the code to {remote.host.label}")
    print(
        f"code: {archive.files} files ({archive.bytes} bytes) sent to {remote.host.label} as one "
        f"archive of {len(archive.data)} bytes ({archive.key})",
        file=sys.stderr,
    )
    return where


def submit_on(remote: Remote, spec: JobSpec, root: Path, argv: Sequence[str]) -> int:
    """`jzk submit --on HOST ARGV`: the code shipped, then `jzk submit --json ARGV` on the
    login node from the project's folder there; the run recorded here."""
    project = ship_code(remote, spec, root)
    out = remote.run(["submit", "--json", *argv], cwd=project, timeout=900)
    lines = (out.stdout or "").rstrip("\n").splitlines()
    if out.stderr:
        print(out.stderr.rstrip("\n"), file=sys.stderr)
    if out.returncode != 0 or not lines:
        raise remote_failure(out, f"jzk submit on {remote.host.label}")
    record = json.loads(lines[-1])
    for line in lines[:-1]:
        print(line)
    run = registry.RemoteRun(
        host=remote.host.label,
        name=Path(record["run_dir"]).name,
        run_dir=record["run_dir"],
        project=project,
        jobs=list(record["jobs"]),
        log=record.get("log", ""),
        submitted_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    )
    registry.record_run(state_dir(dict(os.environ)), run)
    name = run.name
    print(f"  from here: jzk status {name}   jzk logs -f {name}   jzk pull {name}")
    return 0


# -- python train.py -m hydra.launcher.on=HOST -------------------------------------------


def sweep_argv(argv: Sequence[str], root: Path) -> tuple[str, list[str]]:
    """The sweep's own command line as the login node runs it in the project's folder
    there: (program, argv), without hydra.launcher.on (it would send it on again) and
    without a hydra.sweep.dir of this machine's."""
    script, rest = argv[0], list(argv[1:])
    kept = [
        a
        for a in rest
        if not a.lstrip("+~").startswith("hydra.launcher.on=")
        and not (
            a.lstrip("+~").startswith("hydra.sweep.dir=") and Path(a.split("=", 1)[1]).is_absolute()
        )
    ]
    if Path(script).name == "jzk":
        return "jzk", kept
    try:
        relative = Path(script).resolve().relative_to(root.resolve())
    except ValueError:
        raise JzkError(
            f"{script} is not in the project {root}: hydra.launcher.on sends the project's "
            "code, so the sweep's script must be part of it. HINT: run it from the project"
        ) from None
    return "python", [relative.as_posix(), *kept]


def sweep_on(remote: Remote, spec: JobSpec, root: Path, argv: Sequence[str]) -> list[str]:
    """`python train.py -m ... hydra.launcher.on=HOST`: the points were validated here;
    the code is sent, and the same sweep is launched on the login node from the project's
    folder there (its launcher submits the arrays). Returns the job ids it printed."""
    import re

    project = ship_code(remote, spec, root)
    program, there = sweep_argv(argv, root)
    out = remote.run(there, cwd=project, timeout=1800, program=program)
    text = (out.stdout or "") + (out.stderr or "")
    print(text.rstrip("\n"), file=sys.stderr)
    if out.returncode != 0:
        raise remote_failure(out, f"the sweep on {remote.host.label}")
    found = re.search(r"manifest: (\S+manifest\.jsonl)", text)
    if found is None:
        raise JzkError(f"the sweep on {remote.host.label} said no manifest: {text[-300:]}")
    sweep_dir = str(Path(found.group(1)).parent)
    jobs = list(dict.fromkeys(re.findall(r"#\d+ job (\d+)", text)))
    run = registry.RemoteRun(
        host=remote.host.label,
        name=Path(sweep_dir).name,
        run_dir=sweep_dir,
        project=project,
        jobs=jobs,
        submitted_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    )
    registry.record_run(state_dir(dict(os.environ)), run)
    print(f"  from here: jzk status {run.name}   jzk logs {run.name}", file=sys.stderr)
    return jobs
