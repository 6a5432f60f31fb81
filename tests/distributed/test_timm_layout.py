"""A timm-style project of its own (issue 65), written only against torch: `train.py`
saves `output/train/<experiment>/checkpoint-N.pth.tar` and `last.pth.tar` after each
epoch and resumes with `--resume <path>`, as timm's train.py does; the project holds an
image folder under `data/`, `pretrained/` weights, and an `output/train/` left by earlier
plain runs (a stale `tiny/last.pth.tar` at epoch 40, an `old-run/` of another shape).

Locally: stopped by SIGUSR1 and run again, every attempt loads the run's own newest
checkpoint, never the project's; a resume naming another run's file is refused before
the script starts. tests/slurm/test_frozen_paths.py runs the same project on the cluster.
"""

from __future__ import annotations

import hashlib
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

JZK = str(Path(sys.executable).parent / "jzk")

SCRIPT = """
import argparse, os, signal, time
import torch
import torch.distributed as dist
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("data_dir")
parser.add_argument("--output", default="output/train")
parser.add_argument("--experiment", default="exp")
parser.add_argument("--resume", default="")
parser.add_argument("--epochs", type=int, default=6)
parser.add_argument("--sleep", type=float, default=0.0)
args = parser.parse_args()
if "RANK" in os.environ:
    dist.init_process_group("gloo")
rank = dist.get_rank() if dist.is_initialized() else 0
images = sorted(
    os.path.join(root, f) for root, _, files in os.walk(args.data_dir) for f in files
)
print(f"{len(images)} images in {args.data_dir}", flush=True)
model, start_epoch = nn.Linear(4, 2), 0
if args.resume:
    checkpoint = torch.load(args.resume, map_location="cpu", weights_only=True)
    model.load_state_dict(checkpoint["state_dict"])
    start_epoch = checkpoint["epoch"] + 1
    print(f"Loaded checkpoint '{args.resume}' (epoch {checkpoint['epoch']})", flush=True)
folder = os.path.join(args.output, args.experiment)
os.makedirs(folder, exist_ok=True)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(start_epoch, args.epochs):
    loss = model(torch.randn(8, 4)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if rank == 0:
        state = {"epoch": epoch, "state_dict": model.state_dict()}
        path = os.path.join(folder, f"checkpoint-{epoch}.pth.tar")
        torch.save(state, path + ".tmp")
        os.replace(path + ".tmp", path)
        torch.save(state, os.path.join(folder, "last.pth.tar.tmp"))
        os.replace(os.path.join(folder, "last.pth.tar.tmp"), os.path.join(folder, "last.pth.tar"))
    print(f"epoch {epoch} done", flush=True)
    time.sleep(args.sleep)
if dist.is_initialized():
    dist.destroy_process_group()
"""


def make_project(root: Path) -> dict[str, str]:
    """The user's project; returns the digests of the files no run may touch."""
    root.mkdir(parents=True)
    (root / "train.py").write_text(SCRIPT)
    for c in range(2):
        for i in range(10):
            path = root / "data" / "train" / f"class{c}" / f"{i}.jpg"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(bytes([c, i]) * 1500)
    (root / "pretrained").mkdir()
    torch.save({"w": torch.zeros(64, 64)}, root / "pretrained" / "resnet.pth")
    stale = root / "output" / "train" / "tiny"
    stale.mkdir(parents=True)
    torch.save(
        {"epoch": 40, "state_dict": torch.nn.Linear(4, 2).state_dict()}, stale / "last.pth.tar"
    )
    (stale / "args.yaml").write_text("epochs: 3\n")
    old = root / "output" / "train" / "old-run"
    old.mkdir(parents=True)
    (old / "last.pth.tar").write_bytes(b"not a checkpoint of this model")
    return project_digests(root)


def project_digests(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for sub in ("data", "pretrained", "output")
        for p in sorted((root / sub).rglob("*"))
        if p.is_file()
    }


def loaded_epochs(out: str) -> list[int]:
    return [int(e) for e in re.findall(r"Loaded checkpoint '.*?' \(epoch (\d+)\)", out)]


def jzk_train(project: Path, *overrides: str) -> subprocess.Popen:
    return subprocess.Popen(
        [JZK, "train", "job.entry=train.py", "resources.gpus_per_node=2", *overrides],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


ARGS = "job.args=[data,--experiment,tiny,--epochs,6,--sleep,0.5]"
RESUME = "job.resume_args=[--resume,output/train/tiny/last.pth.tar]"


@pytest.mark.timeout(300)
def test_a_timm_style_script_resumes_its_own_checkpoint_here(tmp_path: Path) -> None:
    project = tmp_path / "timm project"
    untouched = make_project(project)
    proc = jzk_train(project, ARGS, RESUME)
    deadline = time.monotonic() + 120
    while not list(project.glob("outputs/*/cwd/output/train/tiny/checkpoint-1.pth.tar")):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.2)
    proc.send_signal(signal.SIGUSR1)  # the launcher passes it on; the script dies of it
    first, _ = proc.communicate(timeout=120)
    assert proc.returncode == 3, first
    assert loaded_epochs(first) == [] and "20 images in data" in first, first
    (own,) = project.glob("outputs/*/cwd/output/train/tiny/last.pth.tar")
    saved = torch.load(own, weights_only=True)["epoch"]
    again = jzk_train(project, ARGS, RESUME)
    second, _ = again.communicate(timeout=120)
    assert again.returncode == 0, second
    # Every rank loads the run's own newest checkpoint, not the project's at epoch 40.
    assert set(loaded_epochs(second)) == {saved} and saved != 40, second
    assert f"epoch {saved + 1} done" in second and "epoch 5 done" in second
    assert project_digests(project) == untouched  # the project's files untouched


@pytest.mark.timeout(300)
def test_a_resume_naming_another_runs_file_is_refused_before_the_script(tmp_path: Path) -> None:
    project = tmp_path / "timm project"
    untouched = make_project(project)
    old = "job.resume_args=[--resume,output/train/old-run/last.pth.tar]"
    proc = jzk_train(project, ARGS.replace("6,", "2,"), old)
    first, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, first  # the first attempt has nothing to resume
    again = jzk_train(project, ARGS.replace("6,", "2,"), old)
    second, _ = again.communicate(timeout=120)
    assert again.returncode == 2, second
    assert "job.resume_args names output/train/old-run/last.pth.tar" in second, second
    assert "Traceback" not in second and "images in" not in second  # never started
    assert project_digests(project) == untouched
