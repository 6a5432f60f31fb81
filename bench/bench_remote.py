"""Laptop mode's costs (issue 66 point 9), against a real OpenSSH server and the local
Slurm cluster, as tests/slurm/test_remote.py drives them.

    sudo .venv/bin/python bench/bench_remote.py [--rounds 4]

The laptop is this process's user with a home of its own; the login node is a second
account behind an sshd on 127.0.0.1 (tests/slurm/ssh_server.py) that sees the local Slurm
cluster (scripts/slurm-local, started here and stopped at the end). Three measurements:

* overhead: wall time of `jzk submit --on HOST ...` from a laptop project folder (the code
  already there) against the same `jzk submit --json ...` typed on the login node itself,
  `ssh HOST 'cd <the project's folder there> && <venv>/bin/jzk submit ...'` over the same
  warm master connection: the ratio is what the laptop's side (composing, validating,
  packing, the hello) costs. The first submission, which also sends the code, is
  reported apart. A tiny run (train.steps=5, 1 GPU), cancelled once submitted.
* connections: the logins each command costs (sshd's log) and the ssh processes it
  starts (an `ssh` first on PATH logs each call, then runs /usr/bin/ssh): remote setup,
  submit --on from a closed and from an open master, status, logs, pull.
* the archive: bytes on the wire and files, against the frozen tree the submission made
  there (logs/code/<hash>), for a project of ~50 small .py files in subpackages beside a
  data/ folder of 1000 small files that stays on the laptop.

Results go to stdout and bench/results/remote.json.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import shlex
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
JZK = str(Path(PY).parent / "jzk")
SLURM_LOCAL = REPO / "scripts" / "slurm-local"
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))

from common import write_result  # noqa: E402

DATA_FILES = 1000
PACKAGES = 5  # subpackages of the project, each an __init__.py and 9 modules: 50 .py files
MODULES = 9


def why_not() -> str | None:
    """Why this machine cannot run it, or None."""
    if os.geteuid() != 0:
        return "needs root (the local Slurm cluster, sshd, a second user)"
    from tests.slurm import ssh_server

    reason = ssh_server.why_not_available()
    if reason:
        return reason
    if shutil.which("slurmctld") is None and shutil.which("apt-get") is None:
        return "no Slurm packages and no apt-get to install them"
    return None


# --- the laptop's project ------------------------------------------------------------------


def make_project(project: Path) -> dict:
    """The toolkit's train.py, 50 small modules in 5 subpackages, and data/ of 1000 small
    binary files (a git repository: everything tracked, data included, as the worst case:
    the data is still not code, so it stays here)."""
    rng = random.Random(0)
    project.mkdir(parents=True)
    shutil.copy(REPO / "train.py", project / "train.py")
    for p in range(PACKAGES):
        pkg = project / "mylib" / f"part{p}"
        pkg.mkdir(parents=True)
        (pkg / "__init__.py").write_text(f'"""Part {p} of the project\'s library."""\n')
        for m in range(MODULES):
            body = "\n\n".join(
                f"def f{m}_{i}(x: float, y: float = {rng.random():.6f}) -> float:\n"
                f'    """Step {i} of module {m}."""\n'
                f"    return x * {rng.random():.6f} + y ** {i % 3 + 1}\n"
                for i in range(12)
            )
            (pkg / f"mod{m}.py").write_text(f'"""Module {m}."""\n\n{body}')
    data = project / "data"
    data.mkdir()
    for i in range(DATA_FILES):
        (data / f"shard-{i:04d}.bin").write_bytes(rng.randbytes(rng.randint(512, 2048)))
    git = ["git", "-C", str(project), "-c", "user.name=bench", "-c", "user.email=bench@local"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "project"], check=True)
    files = [p for p in project.rglob("*") if p.is_file() and ".git" not in p.parts]
    code = [p for p in files if p.suffix == ".py"]
    return {
        "files": len(files),
        "bytes": sum(p.stat().st_size for p in files),
        "py_files": len(code),
        "py_bytes": sum(p.stat().st_size for p in code),
        "data_files": DATA_FILES,
        "data_bytes": sum(p.stat().st_size for p in data.iterdir()),
    }


def ssh_shim(directory: Path) -> Path:
    """An `ssh` that logs each call (start, end, argv) and runs the real one."""
    directory.mkdir(parents=True)
    log = directory / "ssh-calls.log"
    shim = directory / "ssh"
    shim.write_text(
        "#!/bin/bash\n"
        'start=$(date +%s.%N); /usr/bin/ssh "$@"; rc=$?\n'
        f'printf "%s %s %s\\n" "$start" "$(date +%s.%N)" "$*" >> "{log}"; exit $rc\n'
    )
    shim.chmod(0o755)
    return log


def what_call(argv: str) -> str:
    if "-O check" in argv:
        return "check (local socket)"
    if "-O exit" in argv:
        return "exit"
    if "ControlMaster=yes" in argv:
        return "master (login)"
    for needle, name in (
        ("remote hello", "hello"),
        ("remote receive", "receive code"),
        ("remote pack", "pack run"),
        ("submit --json", "submit there"),
        ("status --json", "status there"),
        ('venv/bin/jzk" logs', "logs there"),
        ("pip install", "venv + pip"),
        ("wheels/.incoming", "send wheel"),
    ):
        if needle in argv:
            return name
    return "other command"


class Laptop:
    def __init__(self, ssh, root: Path) -> None:
        self.ssh = ssh
        # Short, so the ssh sockets live in the laptop's own state folder
        # (ssh_rules.MAX_SOCKET_DIR), as on a real laptop.
        self.home = root / "h"
        self.home.mkdir()
        self.env = ssh.laptop_env(self.home)
        self.env.pop("SLURM_CONF", None)  # the laptop has no Slurm
        self.project = root / "proj"
        self.overrides = ssh.remote_profile()
        self.calls_log = ssh_shim(root / "shim")
        self.shim_env = dict(self.env, PATH=f"{self.calls_log.parent}:{self.env['PATH']}")
        from jeanzay_kit.remote.ssh_rules import control_dir
        from jeanzay_kit.remote.transport import state_dir

        self.state = state_dir(self.env)
        self.sockets = control_dir(str(self.state), os.getuid())

    def jzk(self, *argv: str, shim: bool = False) -> tuple[subprocess.CompletedProcess, float]:
        start = time.perf_counter()
        out = subprocess.run(
            [JZK, *argv], cwd=self.project, env=self.shim_env if shim else self.env,
            capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        return out, time.perf_counter() - start

    def ssh_argv(self) -> list[str]:
        return ["ssh", "-F", str(self.ssh.ssh_config), "-o", f"ControlPath={self.sockets}/%C"]

    def close_master(self) -> None:
        subprocess.run(
            [*self.ssh_argv(), "-O", "exit", self.ssh.host], capture_output=True, timeout=30
        )

    def counted(self, *argv: str, closed: bool = True) -> dict:
        """One command with the logging ssh: its logins, its ssh calls, its wall time."""
        if closed:
            self.close_master()
        self.calls_log.write_text("")
        before = self.ssh.authentications()
        began = time.time()
        out, wall = self.jzk(*argv, shim=True)
        ended = time.time()
        time.sleep(0.2)  # sshd writes its log line
        if out.returncode != 0:
            raise RuntimeError(f"jzk {' '.join(argv[:3])} failed: {out.stdout}{out.stderr}")
        calls: list[dict[str, Any]] = []
        spans: list[tuple[float, float]] = []
        for line in self.calls_log.read_text().splitlines():
            start, end, rest = line.split(" ", 2)
            spans.append((float(start), float(end)))
            calls.append({"what": what_call(rest), "s": round(float(end) - float(start), 3)})
        # Where the command's own time goes: before its first ssh call (start-up, compose,
        # validate, pack), between calls, after the last (the registry, the output).
        here = {
            "before_first_call_s": round(spans[0][0] - began, 3) if spans else None,
            "between_calls_s": round(sum(b[0] - a[1] for a, b in itertools.pairwise(spans)), 3),
            "after_last_call_s": round(ended - spans[-1][1], 3) if spans else None,
        }
        return {
            "here": here,
            "logins": self.ssh.authentications() - before,
            "ssh_calls": len(calls),
            "over_the_wire": sum(1 for c in calls if not c["what"].startswith("check")),
            "calls": calls,
            "wall_s": round(wall, 3),
            "stdout": out.stdout,
            "stderr": out.stderr,
        }

    def job(self, name: str) -> list[str]:
        return [
            *self.overrides, f"job.name={name}", "job.entry=train.py", "job.entry_kind=toolkit",
            "resources.gpus_per_node=1", "train.steps=5",
        ]  # fmt: skip

    def last_record(self) -> dict:
        return json.loads((self.state / "runs.jsonl").read_text().splitlines()[-1])


def cancel(jobs: list[str], env: dict[str, str]) -> None:
    """scancel the jobs (root may), then wait until the queue no longer holds them."""
    if not jobs:
        return
    subprocess.run(["scancel", *jobs], env=env, capture_output=True, timeout=60)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        out = subprocess.run(
            ["squeue", "-h", "-j", ",".join(jobs), "-o", "%i"],
            env=env, capture_output=True, text=True, timeout=60,
        ).stdout  # fmt: skip
        if not out.strip():
            return
        time.sleep(0.3)


def wait_ended(job: str, env: dict[str, str], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = subprocess.run(
            ["squeue", "-h", "-j", job, "-o", "%T"], env=env, capture_output=True, text=True
        ).stdout
        if not out.strip():
            return
        time.sleep(0.5)
    raise RuntimeError(f"job {job} still queued after {timeout:.0f} s")


def tree(path: Path) -> tuple[int, int]:
    files = [p for p in path.rglob("*") if p.is_file() and not p.is_symlink()]
    return len(files), sum(p.stat().st_size for p in files)


def measure(ssh, slurm_env: dict[str, str], root: Path, rounds: int) -> dict:
    lap = Laptop(ssh, root)
    result: dict = {"project": make_project(lap.project)}
    commands: dict[str, dict] = {}

    # -- remote setup, from a closed master -------------------------------------------------
    commands["remote setup"] = lap.counted("remote", "setup", ssh.host, *lap.overrides)
    print(f"setup: {commands['remote setup']['wall_s']:.1f} s", flush=True)

    # -- the first submission: the code sent (the master open, as after setup) ----------------
    out, first = lap.jzk("submit", "--on", ssh.host, *lap.job("first"))
    if out.returncode != 0:
        raise RuntimeError(f"the first submit --on failed: {out.stdout}{out.stderr}")
    record = lap.last_record()
    cancel(record["jobs"], slurm_env)
    sent = [x for x in out.stderr.splitlines() if x.startswith("code:")]
    result["first_submit_s"] = round(first, 3)
    result["first_submit_said"] = sent
    project_there = lap.ssh.work / "jzk" / record["project"]
    run_dir = Path(record["run_dir"])

    # -- the archive, against the frozen tree there ------------------------------------------
    archives = sorted((ssh.work / "jzk" / "code-archives").glob("*.tar.gz"))
    with tarfile.open(archives[-1], "r:gz") as tar:
        members = [m for m in tar.getmembers() if m.isfile()]
    frozen_dirs = sorted(d for d in (project_there / "logs" / "code").iterdir() if d.is_dir())
    frozen_files, frozen_bytes = tree(frozen_dirs[-1])
    frozen_py = [p for p in frozen_dirs[-1].rglob("*.py")]
    result["archive"] = {
        "wire_bytes": archives[-1].stat().st_size,
        "files": len(members),
        "unpacked_bytes": sum(m.size for m in members),
        "data_files_sent": sum(1 for m in members if m.name.startswith("data/")),
        "frozen_dir": str(frozen_dirs[-1].relative_to(project_there)),
        "frozen_files": frozen_files,
        "frozen_bytes": frozen_bytes,
        "frozen_py_files": len(frozen_py),
        "frozen_py_bytes": sum(p.stat().st_size for p in frozen_py),
    }
    print(json.dumps(result["archive"]), flush=True)

    # -- the overhead: submit --on (code there) vs the same submit typed on the login node ---
    setup = f"export PYTHONPATH={shlex.quote(ssh.site_packages)}"
    folder = f"$HOME/work/jzk/{record['project']}"

    def ours(name: str) -> tuple[float, list[str]]:
        out, wall = lap.jzk("submit", "--on", ssh.host, *lap.job(name))
        if out.returncode != 0 or "already on" not in out.stderr:
            raise RuntimeError(f"submit --on {name}: {out.stdout}{out.stderr}")
        return wall, lap.last_record()["jobs"]

    def baseline(name: str) -> tuple[float, list[str]]:
        line = f'{setup}; cd "{folder}" && $HOME/work/jzk/venv/bin/jzk submit --json ' + shlex.join(
            lap.job(name)
        )
        start = time.perf_counter()
        out = subprocess.run(
            [*lap.ssh_argv(), "-o", "ControlMaster=auto", "-o", "BatchMode=yes", ssh.host, line],
            env=lap.env, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        wall = time.perf_counter() - start
        if out.returncode != 0:
            raise RuntimeError(f"submit on the login node {name}: {out.stdout}{out.stderr}")
        return wall, list(json.loads(out.stdout.strip().splitlines()[-1])["jobs"])

    result["rounds"] = []
    for r in range(rounds):
        pair = {}
        order = [("ours", ours), ("login_node", baseline)]
        for side, fn in order if r % 2 == 0 else order[::-1]:
            wall, jobs = fn(f"{side}-r{r}")
            cancel(jobs, slurm_env)
            pair[f"{side}_s"] = round(wall, 3)
        pair["ratio"] = round(pair["ours_s"] / pair["login_node_s"], 4)
        result["rounds"].append(pair)
        print(json.dumps(pair), flush=True)

    # -- connections per command -------------------------------------------------------------
    closed = lap.counted("submit", "--on", ssh.host, *lap.job("count-closed"))
    cancel(lap.last_record()["jobs"], slurm_env)
    commands["submit --on (master closed)"] = closed
    commands["submit --on (master open)"] = lap.counted(
        "submit", "--on", ssh.host, *lap.job("count-open"), closed=False
    )
    done = lap.last_record()  # this one runs its 5 steps: logs and pull then have a run
    wait_ended(done["jobs"][-1], slurm_env)
    commands["status"] = lap.counted("status")
    commands["logs"] = lap.counted("logs", done["name"])
    commands["pull"] = lap.counted("pull", done["name"])
    for name, c in commands.items():
        print(
            f"{name:28s} logins {c['logins']}  ssh calls {c['ssh_calls']} "
            f"({c['over_the_wire']} over the wire)  {c['wall_s']:.2f} s  here {c['here']}",
            flush=True,
        )
        c.pop("stdout")
        c.pop("stderr")
    result["commands"] = commands
    lap.close_master()
    result["run_dir_example"] = str(run_dir)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    reason = why_not()
    if reason:
        sys.exit(f"bench_remote: {reason}")
    from tests.slurm import ssh_server

    t0 = time.monotonic()
    # World-readable (0755, under /tmp): the second user's client commands need SLURM_CONF
    # and the munge socket (tests/slurm/conftest.py).
    state = Path(tempfile.mkdtemp(prefix="jzk-slurm-", dir="/tmp"))
    state.chmod(0o755)
    root = Path(tempfile.mkdtemp(prefix="jzb"))  # short: the ssh sockets live under it
    try:
        up = subprocess.run(
            [str(SLURM_LOCAL), "up", str(state)], capture_output=True, text=True, timeout=600
        )
        if up.returncode != 0:
            sys.exit(f"bench_remote: scripts/slurm-local up failed: {up.stderr[-2000:]}")
        slurm_env = dict(os.environ, SLURM_CONF=str(state / "etc" / "slurm.conf"))
        print(f"cluster up: {time.monotonic() - t0:.0f} s", flush=True)
        with ssh_server.serve(slurm_env) as ssh:
            result = measure(ssh, slurm_env, root, args.rounds)
    finally:
        subprocess.run([str(SLURM_LOCAL), "down", str(state)], capture_output=True, timeout=120)
        shutil.rmtree(state, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)

    summarize(result, time.monotonic() - t0)
    print(json.dumps(result["summary"], indent=2))
    write_result("remote", result)


def summarize(result: dict, seconds: float) -> None:
    """result["summary"]: the figures bench/run.py reads (tests/slurm/test_remote.py
    measures one round on the suite's own server and cluster)."""
    ours = [r["ours_s"] for r in result["rounds"]]
    base = [r["login_node_s"] for r in result["rounds"]]
    a = result["archive"]
    c = result["commands"]
    result["summary"] = {
        "ours_s": statistics.median(ours),
        "login_node_s": statistics.median(base),
        "overhead_ratio": statistics.median(r["ratio"] for r in result["rounds"]),
        "first_submit_s": result["first_submit_s"],
        "first_vs_login_node": round(result["first_submit_s"] / statistics.median(base), 4),
        "logins": {k: v["logins"] for k, v in c.items()},
        "ssh_calls": {k: v["ssh_calls"] for k, v in c.items()},
        "archive_vs_frozen_bytes": round(a["wire_bytes"] / a["frozen_bytes"], 4),
        "archive_vs_frozen_files": round(a["files"] / a["frozen_files"], 4),
        "wire_vs_project_bytes": round(a["wire_bytes"] / result["project"]["bytes"], 4),
        "seconds": round(seconds, 1),
    }


if __name__ == "__main__":
    main()
