"""Laptop mode, as a laptop user meets it (issue 66): a project folder of its own, the
user's OpenSSH (a real sshd on this machine, tests/slurm/ssh_server.py) to a second
account standing for the cluster's login node, and the local Slurm cluster behind it.

`jzk remote setup` once; `jzk submit --on`; a preemption signal sent on the cluster side
requeues the job, which resumes to the model of an uninterrupted run; `jzk status` on the
laptop follows it to COMPLETED; `logs -f`, `pull`, `report`, `cancel` find the run by its
name. Each command authenticates at most once (the server's log), and every failure of
the connection is one line that leaves nothing behind.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from jeanzay_kit.remote.ssh_rules import control_dir
from jeanzay_kit.remote.transport import state_dir
from tests.mounts import tmpfs
from tests.slurm.cluster import JZK, PYTHON, REPO, Reference, wait_until_step
from tests.slurm.ssh_server import NO_SERVER_HOST, WRONG_KEY_HOST

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(600)]

TRAINING = ["train.steps=400", "train.log_every=20", "checkpoint.every_steps=50"]


class Laptop:
    """Commands run on the laptop, from the user's project folder, with its own home."""

    def __init__(self, ssh_cluster, root: Path) -> None:
        self.ssh = ssh_cluster
        self.home = root / "laptop-home"
        self.home.mkdir(parents=True, exist_ok=True)
        self.env = ssh_cluster.laptop_env(self.home)
        self.env.pop("SLURM_CONF", None)  # the laptop has no Slurm
        self.project = root / "my project"
        self.overrides = ssh_cluster.remote_profile()

    def jzk(self, *argv: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [JZK, *argv], cwd=self.project, env=self.env, capture_output=True, text=True,
            timeout=timeout, stdin=subprocess.DEVNULL,
        )  # fmt: skip

    def close_master(self) -> None:
        """End the shared connection, as ControlPersist would after its idle time."""
        sockets = control_dir(str(state_dir(self.env)), os.getuid())
        subprocess.run(
            ["ssh", "-F", str(self.ssh.ssh_config), "-o", f"ControlPath={sockets}/%C", "-O",
             "exit", self.ssh.host],
            capture_output=True, timeout=30,
        )  # fmt: skip

    def counted(
        self, *argv: str, timeout: float = 300
    ) -> tuple[subprocess.CompletedProcess[str], int]:
        """A command from a closed connection, and the logins it cost."""
        self.close_master()
        before = self.ssh.authentications()
        out = self.jzk(*argv, timeout=timeout)
        return out, self.ssh.authentications() - before

    def on_cluster(self, command: str) -> subprocess.CompletedProcess[str]:
        """A command on the login node, typed there by the user (not through jzk)."""
        return subprocess.run(
            ["ssh", "-F", str(self.ssh.ssh_config), self.ssh.host, command],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip


@pytest.fixture(scope="module")
def laptop(ssh_cluster, tmp_path_factory: pytest.TempPathFactory) -> Laptop:
    """A project of the user's own (its train.py is the toolkit's app, as `jzk init`'s
    README says; a data file and an earlier run's output beside it), set up once."""
    lap = Laptop(ssh_cluster, tmp_path_factory.mktemp("laptop"))
    lap.project.mkdir()
    shutil.copy(REPO / "train.py", lap.project / "train.py")
    (lap.project / "data").mkdir()
    (lap.project / "data" / "tokens.bin").write_bytes(os.urandom(300_000))
    (lap.project / "output").mkdir()
    (lap.project / "output" / "old.pt").write_bytes(b"an earlier run's checkpoint")
    out, logins = lap.counted("remote", "setup", ssh_cluster.host, *lap.overrides, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Slurm commands present there" in out.stdout, out.stdout
    assert "the same as this laptop's" in out.stdout, out.stdout
    assert logins == 1, out.stdout
    return lap


def job_args(lap: Laptop, name: str, *more: str) -> list[str]:
    return [
        *lap.overrides, f"job.name={name}", "job.entry=train.py", "job.entry_kind=toolkit",
        "resources.gpus_per_node=2", *more,
    ]  # fmt: skip


def remote_state(lap: Laptop, name: str) -> dict:
    (row,) = [r for r in all_remote_rows(lap) if r.get("run") == name]
    return row


def test_submit_preempt_resume_follow_pull_from_the_laptop(laptop: Laptop, tmp_path: Path) -> None:
    lap = laptop
    out, logins = lap.counted("submit", "--on", lap.ssh.host, *job_args(lap, "lap", *TRAINING))
    assert out.returncode == 0, out.stdout + out.stderr
    assert logins == 1  # one master connection for hello, the code and the submission
    assert "sent to jzk-test-cluster as one archive" in out.stderr, out.stderr
    record = json.loads((state_dir(lap.env) / "runs.jsonl").read_text().splitlines()[-1])
    run_dir, job_id = Path(record["run_dir"]), record["jobs"][0]
    name = record["name"]
    assert run_dir.is_relative_to(lap.ssh.work / "jzk" / "projects")
    # Only code went: no data, no earlier output, in the project's folder there.
    there = run_dir.parents[1]
    assert (there / "train.py").is_file()
    assert not (there / "data").exists() and not (there / "output").exists()

    log = Path(record["log"])
    wait_until_step(run_dir, 100, log, timeout=240)
    signal = lap.on_cluster(f"scancel --signal=USR1 {job_id}")  # as Slurm's time-limit warning
    assert signal.returncode == 0, signal.stderr
    reference = Reference(["resources.gpus_per_node=2", *TRAINING], tmp_path / "reference")
    deadline = time.monotonic() + 400
    while (row := remote_state(lap, name))["state"] not in ("COMPLETED", "FAILED", "CANCELLED"):
        assert time.monotonic() < deadline, row
        time.sleep(3)
    assert row["state"] == "COMPLETED", row
    assert (run_dir / "model_final.sha256").read_text().strip() == reference.digest()
    table = lap.jzk("status")  # one table: the remote run as HOST:JOB, with its progress
    assert f"{lap.ssh.host}:{job_id}" in table.stdout and "400/400" in table.stdout, table.stdout

    # The same code again: not sent again.
    again = lap.jzk("submit", "--on", lap.ssh.host, "--test-only", *job_args(lap, "lap", *TRAINING))
    assert "already on jzk-test-cluster" in again.stderr, again.stdout + again.stderr

    logs, logins = lap.counted("logs", "-f", name)
    assert logs.returncode == 0 and "jzk: start 2 of job" in logs.stdout, logs.stdout[-2000:]
    assert logins == 1
    pulled, logins = lap.counted("pull", name)
    assert pulled.returncode == 0, pulled.stderr
    assert logins == 1
    local = lap.project / "pulled" / name
    assert (local / "metrics.jsonl").is_file() and (local / "model_final.sha256").is_file()
    assert not (local / "checkpoints").exists()
    report = lap.jzk("report", str(local))
    assert report.returncode == 0, report.stderr


def test_a_sweep_from_python_train_py_on_the_laptop_runs_there(laptop: Laptop) -> None:
    """`python train.py -m ... hydra.launcher.on=HOST`: the points validated on the laptop
    (a bad one refused before any connection), the sweep launched on the login node, its
    points followed from the laptop by `jzk status`."""
    lap = laptop
    argv = [PYTHON, "train.py", "-m", *lap.overrides, f"hydra.launcher.on={lap.ssh.host}",
            "job.name=sweep", "resources.gpus_per_node=2", "train.steps=40",
            "optim.lr=0.1,0.05"]  # fmt: skip
    bad = subprocess.run([*argv, "resources.partition=nope"], cwd=lap.project, env=lap.env,
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert bad.returncode == 2 and "resources.partition=nope" in bad.stderr, bad.stderr[-2000:]
    lap.close_master()
    before = lap.ssh.authentications()
    out = subprocess.run(argv, cwd=lap.project, env=lap.env, capture_output=True, text=True,
                         timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert lap.ssh.authentications() - before == 1
    assert "from here: jzk status sweep" in out.stderr, out.stderr[-2000:]
    deadline = time.monotonic() + 300
    while True:
        rows = [r for r in all_remote_rows(lap) if str(r["run"]).startswith("sweep/")]
        if len(rows) == 2 and all(r["state"] in ("COMPLETED", "FAILED") for r in rows):
            break
        assert time.monotonic() < deadline, rows
        time.sleep(3)
    assert [r["state"] for r in rows] == ["COMPLETED", "COMPLETED"], rows


def all_remote_rows(lap: Laptop) -> list[dict]:
    out = lap.jzk("status", "--json")
    assert out.returncode == 0, out.stderr
    return [json.loads(x) for x in out.stdout.splitlines() if x.startswith("{")]


SCRIPT = """
import argparse, os
import numpy as np
import torch

parser = argparse.ArgumentParser()
parser.add_argument("--data", required=True)
parser.add_argument("--out", default="out")
parser.add_argument("--iters", type=int, default=30)
args = parser.parse_args()
tokens = np.memmap(args.data, dtype=np.uint16, mode="r")
model = torch.nn.Embedding(256, 4)
os.makedirs(args.out, exist_ok=True)
path = os.path.join(args.out, "ckpt.pt")
start = torch.load(path, weights_only=True)["iter"] + 1 if os.path.exists(path) else 0
print(f"{len(tokens)} tokens, starting at iter {start}", flush=True)
for it in range(start, args.iters):
    loss = model(torch.as_tensor(tokens[it : it + 8].astype(np.int64) % 256)).pow(2).mean()
    loss.backward()
torch.save({"iter": args.iters - 1, "model": model.state_dict()}, path + ".tmp")
os.replace(path + ".tmp", path)
print("saved", path, flush=True)
"""


def test_a_script_of_the_users_own_runs_there_on_data_that_lives_there(
    laptop: Laptop, tmp_path: Path
) -> None:
    """The usual remote case: a module-level script with its own arguments, sent from the
    laptop, reading a token file that lives on the cluster (never sent), writing out/ in
    its run's own folder there."""
    lap = laptop
    project = tmp_path / "nanogpt-like"
    project.mkdir()
    (project / "train_script.py").write_text(SCRIPT)
    data = lap.ssh.work / "data" / "tokens.bin"  # on the cluster, the cluster user's
    data.parent.mkdir(exist_ok=True)
    np.arange(1000, dtype=np.uint16).tofile(data)
    shutil.chown(data.parent, lap.ssh.user)
    shutil.chown(data, lap.ssh.user)
    out = subprocess.run(
        [JZK, "submit", "--on", lap.ssh.host, *lap.overrides, "job.name=script",
         "job.entry=train_script.py", f"job.args=[--data,{data}]", "resources.gpus_per_node=1"],
        cwd=project, env=lap.env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    name = json.loads((state_dir(lap.env) / "runs.jsonl").read_text().splitlines()[-1])["name"]
    deadline = time.monotonic() + 180
    while (row := remote_state(lap, name))["state"] not in ("COMPLETED", "FAILED", "CANCELLED"):
        assert time.monotonic() < deadline, row
        time.sleep(2)
    logs = lap.jzk("logs", name)
    assert row["state"] == "COMPLETED", logs.stdout[-2000:]
    assert "1000 tokens, starting at iter 0" in logs.stdout and "saved out/ckpt.pt" in logs.stdout
    (ckpt,) = (lap.ssh.work / "jzk" / "projects").glob(
        "nanogpt-like-*/outputs/script-*/cwd/out/ckpt.pt"
    )
    assert torch.load(ckpt, weights_only=True)["iter"] == 29


def test_cancel_from_the_laptop_by_the_runs_name(laptop: Laptop) -> None:
    lap = laptop
    out = lap.jzk("submit", "--on", lap.ssh.host, *job_args(lap, "long", "train.steps=100000"))
    assert out.returncode == 0, out.stderr
    record = json.loads((state_dir(lap.env) / "runs.jsonl").read_text().splitlines()[-1])
    cancel = lap.jzk("cancel", record["name"])
    assert cancel.returncode == 0 and "cancelled 1 job(s)" in cancel.stdout, cancel.stderr
    # A busy CI machine: each status is one login over SSH, then squeue and sacct there.
    deadline, seen = time.monotonic() + 180, []
    while (row := remote_state(lap, record["name"]))["state"] != "CANCELLED":
        seen.append((round(time.monotonic() - deadline + 180), row["state"]))
        assert time.monotonic() < deadline, (seen, row, lap.on_cluster("squeue; sacct -D").stdout)
        time.sleep(2)
    print("states seen before CANCELLED:", seen)


@pytest.mark.parametrize(
    ("host", "extra", "said"),
    [
        (NO_SERVER_HOST, [], "refuses the connection"),
        (WRONG_KEY_HOST, [], "refused the login"),
        ("jzk-test-cluster", ["cluster.remote.workdir='~/elsewhere'"], "is not set up for jzk"),
    ],
)
def test_each_connection_failure_is_one_line_and_leaves_nothing(
    laptop: Laptop, host: str, extra: list[str], said: str
) -> None:
    lap = laptop
    runs = state_dir(lap.env) / "runs.jsonl"
    before = runs.read_text() if runs.exists() else ""
    # The aliases name one host, port and user: one master socket (ssh's %C) for all.
    lap.close_master()
    out = lap.jzk("submit", "--on", host, *job_args(lap, "refused", *extra))
    assert out.returncode == 2, out.stdout + out.stderr
    lines = [x for x in out.stderr.splitlines() if x.strip() and "Permanently added" not in x]
    assert len(lines) == 1 and said in lines[0], out.stderr
    assert "Traceback" not in out.stderr
    assert (runs.read_text() if runs.exists() else "") == before


def test_a_connection_cut_while_the_code_travels_leaves_the_code_as_it_was(laptop: Laptop) -> None:
    """What the login node sees of a lost connection: the archive cut short, then end of
    input. The project's code there stays as it was; the next submission sends it whole."""
    lap = laptop
    projects = lap.ssh.work / "jzk" / "projects"
    (project,) = projects.glob("my_project-*")  # the laptop fixture's project
    before = (project / ".jzk-received.json").read_text()
    setup = f"export PYTHONPATH={lap.ssh.site_packages}"
    cut = subprocess.run(
        ["ssh", "-F", str(lap.ssh.ssh_config), lap.ssh.host,
         f"{setup}; JZK_REMOTE=~/work/jzk ~/work/jzk/venv/bin/jzk remote receive "
         f"--project {project.name} --key 0123456789abcdef"],
        input=b"\x1f\x8b" + os.urandom(5000), capture_output=True, timeout=60,
    )  # fmt: skip
    assert cut.returncode == 2, cut.stderr
    assert b"arrived broken" in cut.stderr and b"Traceback" not in cut.stderr
    assert (project / ".jzk-received.json").read_text() == before
    assert not list((lap.ssh.work / "jzk" / "code-archives").glob(".*.tmp"))


def test_a_full_filesystem_there_is_one_line_and_no_run(laptop: Laptop, tmp_path: Path) -> None:
    """The cluster's work folder full (its archives' folder on a 64 KiB filesystem): the
    code does not fit; one line says where and what to check; nothing is submitted."""
    lap = laptop
    project = tmp_path / "big project"
    project.mkdir()
    shutil.copy(REPO / "train.py", project / "train.py")
    (project / "tables.py").write_text(f"TABLE = {os.urandom(100_000).hex()!r}\n")  # code
    runs = state_dir(lap.env) / "runs.jsonl"
    before = runs.read_text() if runs.exists() else ""
    uid = lap.ssh.work.stat().st_uid
    with tmpfs(lap.ssh.work / "jzk" / "code-archives", f"size=64k,uid={uid},mode=0755"):
        out = subprocess.run(
            [JZK, "submit", "--on", lap.ssh.host, *job_args(lap, "full")], cwd=project,
            env=lap.env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    assert out.returncode == 2, out.stdout + out.stderr
    lines = [x for x in out.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "could not be stored" in lines[0] and "quota" in lines[0], lines
    assert (runs.read_text() if runs.exists() else "") == before


def test_the_laptop_bench_measures_its_figures_on_the_suites_server(
    ssh_cluster, slurm: dict[str, str]
) -> None:
    """bench/bench_remote.py's measurements, one round, on this module's sshd and
    cluster (its own main starts both): each figure bench/run.py reads comes out a
    number, so none silently stops being measured (issue 71 point 4). Last in the module:
    its laptop is a second one, set up after the tests' own."""
    import importlib.util
    import tempfile

    from tests.bench.test_run import RUN, assert_every_figure_measured

    spec = importlib.util.spec_from_file_location("bench_remote", RUN.parent / "bench_remote.py")
    assert spec is not None and spec.loader is not None
    bench_remote = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench_remote)
    root = Path(tempfile.mkdtemp(prefix="jzb"))  # short: the ssh sockets live under it
    try:
        started = time.monotonic()
        result = bench_remote.measure(ssh_cluster, slurm, root, 1)
        bench_remote.summarize(result, time.monotonic() - started)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert_every_figure_measured("remote", result)
