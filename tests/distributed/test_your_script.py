"""A nanoGPT-style script run unchanged on 2 local workers (issue 32).

docs/examples/your_script/train.py has the habits of the scripts users bring: module-level
code, settings from a config file exec'd from the working directory and `--key=value`
arguments, its own `out_dir` and `torch.save` checkpoint, `--init_from=resume`, torchrun's
variables. It handles no signal. Copied into a project folder of its own (a space in its
name), it is stopped by SIGUSR1, goes on from its own checkpoint with job.resume_args (its
iteration counter goes on), and a run with another argument gets a run directory of its
own; the SIGTERM of a user stops it (exit 3), it is not reported as a crash.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.distributed.conftest import REPO
from tests.distributed.test_script_tasks import stop_at
from tests.distributed.test_your_model import JZK, finish, start

EXAMPLE = REPO / "docs" / "examples" / "your_script"
COMMAND = (
    "job.entry=train.py",
    "job.resume_args=[--init_from=resume]",
    "resources.gpus_per_node=2",
    "--",
    "config/tiny.py",
    "--out_dir=${job.run_dir}",
    "--step_seconds=0.05",
)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "my gpt"
    shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns("__pycache__"))
    return folder


def iterations(out: str) -> list[int]:
    return [int(n) for n in re.findall(r"^iter (\d+):", out, re.MULTILINE)]


@pytest.mark.timeout(300)
def test_a_nanogpt_style_script_is_stopped_and_goes_on_from_its_own_checkpoint(
    project: Path,
) -> None:
    proc = start(project, *COMMAND)
    lines = stop_at(proc, "iter 14:")  # after the save at 10, before the one at 20
    err = proc.stderr.read()
    assert proc.returncode == 3, (lines, err[-3000:])
    said = "".join(lines)
    assert "runs the script again with --init_from=resume (job.resume_args)" in said, said
    (run_dir,) = (project / "outputs").glob("jzk-*")
    assert (run_dir / "ckpt.pt").is_file()
    assert json.loads((run_dir / "outcome.json").read_text())["state"] == "STOPPED"
    # Its record says what happened: no save on the signal, which it does not handle.
    (stop,) = (json.loads(x) for x in (run_dir / "endings.jsonl").read_text().splitlines())
    assert stop["kind"] == "stopped" and "after a save" not in stop["evidence"], stop
    assert "SIGUSR1, which the script does not handle" in stop["evidence"], stop

    resumed = finish(start(project, *COMMAND))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "--init_from=resume" in resumed.stdout
    saved_at = int(re.search(r"resuming from .*ckpt.pt at iter (\d+)", resumed.stdout).group(1))
    assert saved_at == 10
    assert iterations(resumed.stdout)[0] == 11  # its own counter goes on
    assert "done: 40 iters" in resumed.stdout
    status = subprocess.run([JZK, "status", str(run_dir)], capture_output=True, text=True)
    assert " COMPLETED " in status.stdout, status.stdout + status.stderr
    # The same command for Slurm is this run too: said before the queue, not in the job.
    checked = subprocess.run(
        [JZK, "validate", "cluster=slurm_local", *COMMAND],
        cwd=project,
        capture_output=True,
        text=True,
    )
    assert f"note: {run_dir} holds this command's run, which ran to its end" in checked.stderr

    # Another argument: another run, which neither resumes nor touches the first one.
    other = finish(start(project, *COMMAND, "--learning_rate=0.01", "--max_iters=12"))
    assert other.returncode == 0, other.stderr[-3000:]
    assert "resuming" not in other.stdout and iterations(other.stdout)[0] == 1
    assert len(list((project / "outputs").glob("jzk-*"))) == 2
    # The same command pointed at the first run's directory is refused, naming the change.
    refused = finish(
        start(project, *COMMAND[:-4], f"job.run_dir={run_dir}", *COMMAND[-4:], "--max_iters=12")
    )
    assert refused.returncode == 2
    assert "belongs to another command (job.args:" in refused.stderr
    assert json.loads((run_dir / "outcome.json").read_text())["state"] == "COMPLETED"
    assert "'--max_iters=12' added" in refused.stderr


@pytest.mark.timeout(300)
def test_sigterm_to_a_local_run_is_a_stop_not_a_crash(project: Path) -> None:
    """SIGTERM to `jzk train` alone (as `kill` does): it passes it on; the script handles no
    SIGTERM and dies of it, which is the stop asked for (exit 3), not a crash."""
    proc = start(project, *COMMAND)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    deadline = time.monotonic() + 120
    while not any(line.startswith("saving checkpoint") for line in lines):
        assert time.monotonic() < deadline and proc.poll() is None, lines
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGTERM)
    proc.wait(timeout=120)
    reader.join(timeout=10)
    err = proc.stderr.read()
    assert proc.returncode == 3, (lines, err[-3000:])
    assert "killed by SIGTERM" not in err
    assert "stopped (SIGTERM)" in "".join(lines)


SINGLE = """\
import os, torch
os.makedirs("out", exist_ok=True)
w = torch.zeros(3)
for it in range(5):
    w += 1
torch.save({"w": w}, "out/ckpt.pt")
print("done", flush=True)
"""


@pytest.mark.timeout(120)
def test_a_script_that_starts_no_process_group_is_warned_when_started_twice(
    tmp_path: Path,
) -> None:
    """cluster=local starts 2 processes by default: a script of one process, unchanged,
    is two copies of one run writing the same files. A user trial saw every line twice,
    unsaid; now one warning with the way to run it once, here and before the queue."""
    (tmp_path / "train.py").write_text(SINGLE)
    twice = finish(start(tmp_path, "job.entry=train.py"))
    assert twice.returncode == 0, twice.stderr[-2000:]
    warned = [x for x in twice.stderr.splitlines() if "warning: job.entry=train.py" in x]
    assert len(warned) == 1 and "runs as 2 processes" in warned[0], twice.stderr
    assert twice.stdout.count("done") == 2
    once = finish(start(tmp_path, "job.entry=train.py", "resources.gpus_per_node=1"))
    assert once.returncode == 0 and "warning" not in once.stderr, once.stderr
    # Before the queue too; and checkpoint.dir, which such a script never reads, is said.
    checked = subprocess.run(
        [JZK, "validate", "job.entry=train.py", f"checkpoint.dir={tmp_path / 'fast'}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert "HINT: resources.gpus_per_node=1 resources.nodes=1" in checked.stderr, checked
    assert f"warning: checkpoint.dir={tmp_path / 'fast'} is where the toolkit" in checked.stderr
