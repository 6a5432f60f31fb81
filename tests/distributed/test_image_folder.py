"""Image classification from a folder of image files (data=image_folder, model=image_cnn):
torchvision's ImageFolder with random crop and flip in 2 loader workers per rank, a
cross-entropy criterion and an accuracy metric on a validation folder of its own, on 2
gloo ranks; preempted with SIGUSR1 and resumed to the uninterrupted run's digest.

The images are PNG files the test writes (no download) into a project folder of the
user's; the shipped configs do the rest. torchvision comes from the virtual environment,
or, where its wheel cannot load next to a CPU-only torch (these machines and CI), from
.venv/vision with tests/vision_compat (scripts/setup.sh and that file say why).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.distributed.conftest import REPO
from tests.distributed.test_resume import last_step

JZK = str(Path(sys.executable).with_name("jzk"))
ASIDE = Path(sys.executable).parent.parent / "vision"
COMPAT = REPO / "tests" / "vision_compat"
CLASSES = ("top_red", "top_green", "bottom_red", "bottom_green")
STEPS = 20


def vision_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    probe = subprocess.run(
        [sys.executable, "-c", "import torchvision"], env=env, capture_output=True
    )
    if probe.returncode == 0:
        return env
    if not ASIDE.is_dir():
        pytest.skip("torchvision is not installed (scripts/setup.sh installs it)")
    return {**env, "PYTHONPATH": f"{COMPAT}{os.pathsep}{ASIDE}"}


def write_images(root: Path, per_class: int, seed: int) -> None:
    """20x20 RGB noise with the class's bright band: the top or the bottom half, in red
    or in green (left-right flips keep the class)."""
    rng = np.random.default_rng(seed)
    for label, name in enumerate(CLASSES):
        folder = root / name
        folder.mkdir(parents=True)
        for i in range(per_class + (label == 0)):  # one more: the set does not split evenly
            pixels = rng.uniform(0, 100, (20, 20, 3))
            half, channel = divmod(label, 2)
            pixels[10 * half : 10 * half + 10, :, channel] += 150
            Image.fromarray(pixels.astype(np.uint8)).save(folder / f"{i:03d}.png")


@pytest.fixture
def images(tmp_path: Path) -> Path:
    project = tmp_path / "vision-project"
    write_images(project / "data" / "train", 40, seed=0)
    write_images(project / "data" / "val", 10, seed=1)
    return project


def command(project: Path, name: str, *extra: str) -> list[str]:
    val = project / "data" / "val"
    return [
        JZK,
        "train",
        "data=image_folder",
        f"data.root={project / 'data' / 'train'}",
        "data.transform.size=16",
        "model=image_cnn",
        "model.num_classes=4",
        "model.width=8",
        "loss=criterion",
        "loss.criterion._target_=torch.nn.CrossEntropyLoss",
        "+eval.data._target_=torchvision.datasets.ImageFolder",
        f"+eval.data.root={val}",
        "+eval.data.transform._target_=jeanzay_kit.examples.images.image_transforms",
        "+eval.data.transform.size=16",
        "+eval.data.transform.train=false",
        "+eval.metrics.accuracy._target_=torchmetrics.classification.MulticlassAccuracy",
        "+eval.metrics.accuracy.num_classes=4",
        "eval.every_steps=10",
        f"train.steps={STEPS}",
        "train.global_batch_size=32",
        "train.micro_batch_size=8",
        "train.log_every=1",
        "optim.lr=0.01",
        "checkpoint.every_steps=100",
        "loader.num_workers=2",
        "resources.gpus_per_node=2",
        f"job.name={name}",
        *extra,
    ]


def start(project: Path, name: str, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        command(project, name),
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # the test signals the launcher, ranks and loader workers
    )


def finish(proc: subprocess.Popen) -> subprocess.CompletedProcess:
    out, err = proc.communicate(timeout=300)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def run_dir(project: Path, name: str) -> Path:
    (found,) = (project / "outputs").glob(f"{name}-*")
    return found


@pytest.mark.timeout(600)
def test_an_image_folder_trains_evaluates_and_resumes_exactly(images: Path) -> None:
    env = vision_env()
    straight = finish(start(images, "straight", env))
    assert straight.returncode == 0, straight.stderr[-3000:]
    assert "check: batch list(Tensor[8, 3, 16, 16] float32, Tensor[8] int64)" in straight.stdout
    records = [json.loads(line) for line in (run_dir(images, "straight") / "metrics.jsonl").open()]
    evaluated = [r for r in records if "eval_accuracy" in r]
    assert [r["step"] for r in evaluated] == [10, 20]
    assert evaluated[-1]["eval_accuracy"] > 0.5, evaluated  # 4 classes: chance is 0.25

    proc = start(images, "cut", env)
    folder = None
    while proc.poll() is None:
        found = list((images / "outputs").glob("cut-*"))
        if found and last_step(found[0]) >= 6:
            folder = found[0]
            break
        time.sleep(0.05)
    assert folder is not None, finish(proc).stderr[-3000:]
    os.killpg(proc.pid, signal.SIGUSR1)
    stopped = finish(proc)
    assert stopped.returncode == 3, stopped.stderr[-3000:]
    resumed = finish(start(images, "cut", env))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from" in resumed.stdout
    # The same random crops and flips after the resume: the same final weights.
    assert (folder / "model_final.sha256").read_text() == (
        run_dir(images, "straight") / "model_final.sha256"
    ).read_text()
