"""A Hydra app as a script task (job.entry=my_app.py), written as a user writes one: its
own project, conf/config.yaml, `@hydra.main`, and a checkpoint saved in Hydra's output
directory. Stopped and run again, it resumes its epochs there (script/hydra_app_rules.py):
Hydra's output directory is <run_dir>/cwd at every start, and the toolkit's own .hydra/
record of the run is never replaced by the app's.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
import yaml

from tests.distributed.test_your_model import JZK, finish, start

APP = """\
import os
import time

import hydra
import torch
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig


@hydra.main(version_base=None, config_path="conf", config_name="config")
def main(cfg: DictConfig) -> None:
    out = HydraConfig.get().runtime.output_dir
    print(f"output dir {out} cwd {os.getcwd()}", flush=True)
    with open("data/words.txt") as f:  # a project file, read relatively after the chdir
        words = f.read().split()
    ckpt = os.path.join(out, "ckpt.pt")
    model = torch.nn.Linear(len(words), 1)
    first = 0
    if os.path.exists(ckpt):
        state = torch.load(ckpt)
        model.load_state_dict(state["model"])
        first = state["epoch"] + 1
        print(f"resumed at epoch {first}", flush=True)
    for epoch in range(first, cfg.epochs):
        time.sleep(cfg.epoch_seconds)
        torch.save({"model": model.state_dict(), "epoch": epoch}, ckpt + ".tmp")
        os.replace(ckpt + ".tmp", ckpt)
        print(f"epoch {epoch} saved", flush=True)
    print("done", flush=True)


if __name__ == "__main__":
    main()
"""


@pytest.fixture
def app(tmp_path: Path) -> Path:
    folder = tmp_path / "hydra-app"
    (folder / "conf").mkdir(parents=True)
    (folder / "data").mkdir()
    (folder / "data" / "words.txt").write_text("a b c\n")
    (folder / "conf" / "config.yaml").write_text("epochs: 6\nepoch_seconds: 0.3\n")
    (folder / "my_app.py").write_text(APP)
    return folder


ARGS = ("job.entry=my_app.py", "resources.gpus_per_node=1", "job.name=app")


def stop_after(proc: subprocess.Popen, marker: str, signum: int) -> list[str]:
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    deadline = time.monotonic() + 120
    while not any(marker in line for line in lines):
        assert time.monotonic() < deadline and proc.poll() is None, lines
        time.sleep(0.05)
    os.killpg(proc.pid, signum)
    proc.wait(timeout=120)
    reader.join(timeout=10)
    return lines


def toolkit_entry(run_dir: Path) -> str:
    return yaml.safe_load((run_dir / ".hydra" / "config.yaml").read_text())["job"]["entry"]


@pytest.mark.timeout(300)
def test_a_hydra_app_stopped_resumes_its_epochs_from_its_output_directory(app: Path) -> None:
    args = (*ARGS, "job.args=[hydra.job.chdir=True]")
    proc = start(app, *args)
    lines = stop_after(proc, "epoch 1 saved", signal.SIGUSR1)  # it handles no signal
    assert proc.returncode == 3, (lines, proc.stderr.read()[-3000:])
    out = "".join(lines)
    (run_dir,) = (app / "outputs").glob("app-*")
    output_dir = (run_dir / "cwd").resolve()
    assert f"output dir {output_dir} cwd {output_dir}" in out, out
    assert "is a Hydra app: its output directory is" in out
    assert "where it wrote its files" in out  # the stop note saw the checkpoint
    assert (run_dir / "cwd" / "ckpt.pt").is_file()

    again = finish(start(app, *args))
    assert again.returncode == 0, again.stderr[-3000:]
    resumed = int(again.stdout.split("resumed at epoch ")[1].split()[0])
    assert 2 <= resumed < 6, again.stdout
    assert "epoch 5 saved" in again.stdout and "epoch 0 saved" not in again.stdout
    # Hydra's record of the app is its own; the toolkit's record of the run is intact.
    assert yaml.safe_load((output_dir / ".hydra" / "config.yaml").read_text())["epochs"] == 6
    assert toolkit_entry(run_dir) == "my_app.py"
    assert not list((app / "outputs").glob("20*"))  # no dated folder of Hydra's own


@pytest.mark.timeout(300)
def test_hydra_run_dir_set_to_the_run_directory_keeps_the_toolkit_record(app: Path) -> None:
    args = (*ARGS, "job.name=own", "job.args=[epochs=1,'hydra.run.dir=${job.run_dir}']")
    done = finish(start(app, *args))
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = (app / "outputs").glob("own-*")
    assert (run_dir / "ckpt.pt").is_file()  # where the user asked
    assert toolkit_entry(run_dir) == "my_app.py"
    app_record = yaml.safe_load((run_dir / "cwd" / ".hydra" / "config.yaml").read_text())
    assert app_record["epochs"] == 1


def test_jzk_validate_says_where_a_hydra_apps_output_directory_is(app: Path) -> None:
    from tests.distributed.test_your_model import JZK, user_env

    command = [JZK, "validate", "cluster=slurm_local", "job.entry=my_app.py", "--", "epochs=3"]
    done = subprocess.run(command, cwd=app, env=user_env(), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    line = "hydra app       its output directory is <run dir>/cwd at every start"
    assert line in done.stdout, done.stdout


APP_ON_ITS_MODULE = """import hydra
from omegaconf import DictConfig
from loop import train


@hydra.main(version_base=None, config_path=".", config_name="config")
def main(cfg: DictConfig) -> None:
    train(cfg)


if __name__ == "__main__":
    main()
"""


@pytest.mark.parametrize(
    ("loop", "warned"),
    [
        ("from jeanzay_kit import session\n\ndef train(cfg):\n    pass\n", False),
        ("def train(cfg):\n    pass\n", True),
    ],
)
def test_the_warning_that_a_requeue_starts_an_app_afresh_spares_a_session_loop(
    tmp_path: Path, loop: str, warned: bool
) -> None:
    """`jzk validate` of a Slurm request: a Hydra app whose loop, in a module of its own,
    is on the session API resumes from the run directory by itself; one whose loop is
    not is warned (a user trial read the warning about the first)."""
    (tmp_path / "app.py").write_text(APP_ON_ITS_MODULE)
    (tmp_path / "loop.py").write_text(loop)
    (tmp_path / "config.yaml").write_text("steps: 10\n")
    argv = [JZK, "validate", "cluster=slurm_local", "job.entry=app.py"]
    done = subprocess.run(
        [*argv, "resources.gpus_per_node=1"], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert ("will start it from the beginning" in done.stderr) is warned, done.stderr
