"""Your model, your data, your loss (docs/your-model-and-data.md), trained as a user does.

The project is docs/examples/your_model, copied into a folder of its own: a map-style
`Dataset` of images with int labels, a small CNN, `torch.nn.CrossEntropyLoss`, and a dict-
batch model that returns its own loss; nothing in it imports jeanzay_kit. `jzk` runs from
that folder with real loader worker processes (loader.num_workers=2) and gloo ranks.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import torch

from jeanzay_kit.runtime.sampler import GlobalBatchPlan
from tests.distributed.conftest import REPO
from tests.distributed.test_resume import last_step

EXAMPLE = REPO / "docs" / "examples" / "your_model"
JZK = str(Path(sys.executable).with_name("jzk"))
# The user's own test helpers, in their own package: a dataset that writes down every
# index it serves, from whichever process reads it (a loader worker has its own pid), and
# two broken pieces for the contract checks.
USER_TEST_CODE = """
import os
from pathlib import Path

import torch
from torch import nn

from userpkg.cnn import SmallCNN
from userpkg.images import RandomImages


def note_built(record: str, what: str) -> None:
    with open(record, "a") as handle:
        handle.write(f"{what} {os.getpid()}\\n")


class CountedCNN(SmallCNN):
    def __init__(self, record: str, **kwargs):
        super().__init__(**kwargs)
        note_built(record, "model")


class CountedImages(RandomImages):
    def __init__(self, record: str, **kwargs):
        super().__init__(**kwargs)
        note_built(record, "dataset")


class RecordedImages(RandomImages):
    def __init__(self, record_dir: str, **kwargs):
        super().__init__(**kwargs)
        self.record_dir = record_dir

    def __getitem__(self, index):
        with (Path(self.record_dir) / f"{os.getpid()}.txt").open("a") as handle:
            handle.write(f"{index}\\n")
        return super().__getitem__(index)


class BadImages(RandomImages):
    def __getitem__(self, index):
        raise KeyError(f"no image {index} in the archive")


class MissingImages(RandomImages):
    def __init__(self, **kwargs):
        raise FileNotFoundError("no such archive: /scratch/images.tar")


class TupleCriterion(nn.Module):
    def forward(self, output, target):
        loss = nn.functional.cross_entropy(output, target)
        return loss, {"accuracy": (output.argmax(1) == target).float().mean()}
"""
SIZE, HELD_OUT = 2000, 100  # train.eval_fraction=0.05 holds out the last 100 samples
STEPS, GLOBAL, MICRO = 24, 64, 16
BASE = (
    f"train.steps={STEPS}",
    f"train.global_batch_size={GLOBAL}",
    f"train.micro_batch_size={MICRO}",
    "train.log_every=1",
    "train.eval_every=0",
    "checkpoint.every_steps=100",
)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "images-project"
    shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns("outputs", "__pycache__"))
    (folder / "userpkg" / "testing.py").write_text(USER_TEST_CODE)
    return folder


def user_env() -> dict[str, str]:
    # The installed toolkit (the virtual environment's jzk), nothing of the checkout.
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def jzk(cwd: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [JZK, *args], cwd=cwd, env=user_env(), capture_output=True, text=True, timeout=timeout
    )


def run_dir_of(cwd: Path, name: str) -> Path:
    found = sorted((cwd / "outputs").glob(f"{name}-*"))
    assert len(found) == 1, found
    return found[0]


def losses(run_dir: Path) -> list[float]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line)["loss"] for line in lines if '"loss"' in line]


@pytest.mark.timeout(300)
def test_a_dataset_and_a_criterion_train_with_loader_workers(project: Path) -> None:
    # Its own limit under pytest's: a hang (seen once in a clean-clone run, under load)
    # then fails with the run's output in the report, not a bare pytest timeout.
    done = jzk(project, "train", "resources.gpus_per_node=2", "train.steps=30", timeout=150)
    assert done.returncode == 0, done.stderr[-3000:]
    # The start-of-run check saw the user's batch, through torch's default_collate.
    assert "check: batch list(Tensor[16, 1, 8, 8] float32, Tensor[16] int64)" in done.stdout
    assert "done: 30 steps" in done.stdout
    seen = losses(run_dir_of(project, "images"))
    assert seen[-1] < seen[0] - 0.1, seen  # it learns

    # The same classes named on the command line, without a YAML: no example key leaks.
    # Each process builds the model and the dataset once: rank 0's start-of-run check
    # tries the very objects it trains (train/parts.py).
    record = project / "built.txt"
    named = jzk(
        project,
        "train",
        "model=custom",
        "model._target_=userpkg.testing.CountedCNN",
        "+model.channels=4",
        f"+model.record={record}",
        "data=custom",
        "data._target_=userpkg.testing.CountedImages",
        "+data.size=256",
        f"+data.record={record}",
        "job.name=named",
        "train.steps=4",
        "train.eval_every=0",
    )
    assert named.returncode == 0, named.stderr[-3000:]
    assert "done: 4 steps" in named.stdout
    built = Counter(record.read_text().splitlines())
    assert set(built.values()) == {1}, built  # nothing built twice by one process
    assert sorted(line.split()[0] for line in built) == ["dataset"] * 2 + ["model"] * 2


@pytest.mark.timeout(300)
def test_dict_batches_and_a_model_that_returns_its_loss(project: Path) -> None:
    done = jzk(
        project,
        "train",
        "model=custom",
        "model._target_=userpkg.dict_batches.Regressor",
        "data=custom",
        "data._target_=userpkg.dict_batches.Regression",
        "loss=output",
        "resources.gpus_per_node=2",
        "job.name=dicts",
        "train.steps=30",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "check: batch dict(features: Tensor[16, 16] float32, labels: Tensor[16, 1]" in (
        done.stdout
    )
    assert "-> Output" in done.stdout
    seen = losses(run_dir_of(project, "dicts"))
    assert seen[-1] < seen[0] / 2, seen


@pytest.mark.timeout(300)
def test_a_validation_set_of_its_own_with_a_metric(project: Path) -> None:
    """101 validation samples on 2 ranks: each read exactly once per evaluation (through
    the loader's workers), and the accuracy logged for the last step is the final model's,
    computed here by hand."""
    val_record = project / "val_record"
    val_record.mkdir()
    done = jzk(
        project,
        "train",
        "resources.gpus_per_node=2",
        "job.name=validated",
        "train.steps=20",
        "eval.every_steps=10",
        "+eval.data._target_=userpkg.testing.RecordedImages",
        f"+eval.data.record_dir={val_record}",
        "+eval.data.size=101",
        "+eval.data.seed=1",
        "+eval.metrics.accuracy._target_=torchmetrics.classification.MulticlassAccuracy",
        "+eval.metrics.accuracy.num_classes=4",
        "+eval.metrics.accuracy.average=micro",
        # Retention keeps one checkpoint, and the best evaluated one besides: by the
        # largest loss, so that the best is the first evaluation's, not the newest.
        "checkpoint.every_steps=10",
        "checkpoint.keep_last=1",
        "checkpoint.keep_best=loss",
        "checkpoint.keep_best_mode=max",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    reads: Counter = Counter()
    for file in val_record.glob("*.txt"):
        reads.update(map(int, file.read_text().split()))
    assert reads == Counter({i: 2 for i in range(101)})  # two evaluations, once each
    assert len(list(val_record.glob("*.txt"))) >= 2  # read by loader workers (their pids)

    run_dir = run_dir_of(project, "validated")
    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    last = [r for r in records if "eval_loss" in r][-1]
    assert last["step"] == 20 and last["eval_samples"] == 101
    assert "| accuracy " in done.stdout

    sys.path.insert(0, str(project))
    try:
        from userpkg.cnn import SmallCNN
        from userpkg.images import RandomImages
    finally:  # the user's package, imported here only
        sys.path.remove(str(project))
        for name in [m for m in sys.modules if m == "userpkg" or m.startswith("userpkg.")]:
            del sys.modules[name]
    model = SmallCNN()
    model.load_state_dict(torch.load(run_dir / "model_final.pt", weights_only=True))
    data = RandomImages(size=101, seed=1)
    with torch.no_grad():
        logits = model(data.images)
    accuracy = float((logits.argmax(1) == data.labels).float().mean())
    loss = float(torch.nn.functional.cross_entropy(logits, data.labels))
    assert abs(last["eval_accuracy"] - accuracy) < 1e-6, (last, accuracy)
    assert abs(last["eval_loss"] - loss) < 1e-5, (last, loss)

    first = [r for r in records if "eval_loss" in r][0]
    assert first["step"] == 10 and first["eval_loss"] > last["eval_loss"]
    assert sorted(p.name for p in (run_dir / "checkpoints").glob("step-*")) == [
        "step-10",
        "step-20",
    ]
    listed = jzk(project, "ckpt", "list", str(run_dir)).stdout.splitlines()  # newest first
    assert [ln.split()[0] for ln in listed] == ["step-20", "step-10"], listed
    assert f"best eval_loss={first['eval_loss']:.4g} (max)" in listed[1], listed
    assert "best" not in listed[0], listed


def start(cwd: Path, *args: str) -> subprocess.Popen:
    # A session of its own: the test signals the whole process group, loader workers
    # included, as Slurm signals every process of a job step.
    return subprocess.Popen(
        [JZK, "train", *args],
        cwd=cwd,
        env=user_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def finish(proc: subprocess.Popen) -> subprocess.CompletedProcess:
    out, err = proc.communicate(timeout=300)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def wait_for_step(proc: subprocess.Popen, cwd: Path, name: str, step: int) -> Path:
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        found = list((cwd / "outputs").glob(f"{name}-*"))
        if found and last_step(found[0]) >= step:
            return found[0]
        time.sleep(0.02)
    raise AssertionError(f"{name} never reached step {step}: {finish(proc).stderr[-3000:]}")


def served(record: Path) -> Counter:
    """Training sample indices read (the held-out ones, read for evaluation, left out)."""
    seen: Counter = Counter()
    for file in record.glob("*.txt"):
        seen.update(i for i in map(int, file.read_text().split()) if i < SIZE - HELD_OUT)
    return seen


def positions(first: int, count: int) -> Counter:
    """The dataset indices at global sample positions [first, first + count)."""
    plan = GlobalBatchPlan(SIZE - HELD_OUT, GLOBAL, GLOBAL, 1, 0, seed=0)
    return Counter(plan.stream(first, count).tolist())


def recorded(project: Path, record: Path, *args: str) -> tuple[str, ...]:
    record.mkdir(exist_ok=True)
    return (
        *BASE,
        "data._target_=userpkg.testing.RecordedImages",
        f"+data.record_dir={record}",
        # Random flips, noise and erasing drawn in __getitem__ with torch, numpy and random
        # (in loader workers): a resumed run augments each sample as the straight one did.
        "+data.augment=true",
        *args,
    )


@pytest.mark.timeout(600)
def test_a_preempted_run_with_loader_workers_resumes_sample_exact(project: Path) -> None:
    """Stopped once, resumed twice from the same checkpoint: on the same 2 ranks (bit for
    bit the uninterrupted run) and, from a copy of the run directory, on 1 (another world
    size sums the same gradients in another order: within rounding)."""
    straight = finish(
        start(
            project,
            *recorded(project, project / "straight"),
            "job.name=straight",
            "resources.gpus_per_node=2",
        )
    )
    assert straight.returncode == 0, straight.stderr[-3000:]
    # One record folder (data.record_dir is in the config, so in the run directory's
    # name), emptied between the attempts.
    record = project / "record"
    proc = start(project, *recorded(project, record), "job.name=cut", "resources.gpus_per_node=2")
    run_dir = wait_for_step(proc, project, "cut", 8)
    os.killpg(proc.pid, signal.SIGUSR1)  # the launcher, its ranks and their loader workers
    stopped = finish(proc)
    assert stopped.returncode == 3, stopped.stderr[-3000:]
    saved = last_step(run_dir)
    assert f"saved step-{saved}" in stopped.stdout and 8 <= saved < STEPS
    record.rename(project / "first")
    other = project / "other-world"
    shutil.copytree(run_dir, other, symlinks=True)

    # Each start's check reads rank 0's first micro-batch once; the rest is the plan's.
    check = positions(0, MICRO)
    assert served(project / "straight") == positions(0, STEPS * GLOBAL) + check
    # The stopped one read everything before it once; what its workers had prefetched
    # past the stop was never trained (and is read again by the resumed attempt).
    before = served(project / "first") - check
    assert before - positions(0, saved * GLOBAL) <= positions(saved * GLOBAL, 8 * GLOBAL)
    assert positions(0, saved * GLOBAL) - before == Counter()
    a = torch.load(run_dir_of(project, "straight") / "model_final.pt", weights_only=True)

    for gpus, folder in ((2, run_dir), (1, other)):
        resumed = finish(
            start(
                project,
                *recorded(project, record),
                "job.name=cut",
                f"resources.gpus_per_node={gpus}",
                f"job.run_dir={folder}",
            )
        )
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        assert f"(step {saved})" in resumed.stdout
        # The resumed attempt reads exactly the positions after the checkpoint, once each.
        rest = positions(saved * GLOBAL, (STEPS - saved) * GLOBAL)
        assert served(record) == rest + check, gpus
        record.rename(project / f"resumed-on-{gpus}")
        b = torch.load(folder / "model_final.pt", weights_only=True)
        worst = max(float((a[k] - b[k]).abs().max()) for k in a)
        assert worst == 0 if gpus == 2 else worst < 1e-5, (gpus, worst)
    assert (run_dir / "model_final.sha256").read_text() == (
        run_dir_of(project, "straight") / "model_final.sha256"
    ).read_text()


def parent_of(pid: int) -> int | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    return int(next(ln.split()[1] for ln in status.splitlines() if ln.startswith("PPid")))


def loader_workers(launcher: int, record: Path) -> list[int]:
    """Live processes that read samples and descend from the launcher through a rank:
    launcher -> multiprocessing's fork server -> rank -> loader worker. A recorded pid of
    a process that ended (the start-of-run check's reader) may have been reused by any
    process of the machine: only the launcher's own descendants count."""
    out = []
    for file in record.glob("*.txt"):
        chain = [int(file.stem)]
        while len(chain) < 5 and chain[-1] not in (launcher, 0, 1):
            parent = parent_of(chain[-1])
            if parent is None:
                break
            chain.append(parent)
        if len(chain) == 4 and chain[-1] == launcher:
            out.append(chain[0])
    return out


@pytest.mark.timeout(300)
def test_a_killed_loader_worker_is_named_and_restarted(project: Path) -> None:
    record = project / "record"
    proc = start(
        project,
        *recorded(project, record),
        "job.name=killed",
        "resources.gpus_per_node=2",
        "train.steps=40",
        "checkpoint.every_steps=5",
        # A rank stuck after the kill has its stacks dumped and is named (seen once in CI:
        # the run never ended, and nothing said where it stood).
        "watchdog.stall_seconds=60",
    )
    run_dir = wait_for_step(proc, project, "killed", 6)
    victims = loader_workers(proc.pid, record)
    assert victims, list(record.glob("*.txt"))
    os.kill(victims[0], signal.SIGKILL)
    try:
        out, err = proc.communicate(timeout=200)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        log = (run_dir / "train.log").read_text(errors="replace")
        raise AssertionError(
            f"the run never ended: {err[-3000:]}\ntrain.log: {log[-6000:]}"
        ) from None
    hangs = {
        p.name: [f.read_text()[-3000:] for f in p.rglob("*.txt")] for p in run_dir.glob("hang-*")
    }
    assert proc.returncode == 0 and not hangs, (proc.returncode, err[-3000:], hangs)
    assert "a DataLoader worker of data._target_=userpkg.testing.RecordedImages" in err, err
    assert "restarting after a crash (1/3)" in err, err[-3000:]
    assert "done: 40 steps" in out


# (overrides, the one line jzk check prints): each contract break of train/check.py.
BREAKS = [
    (
        ("data=synthetic", "data._target_=userpkg.images.RandomImages"),
        "data._target_=userpkg.images.RandomImages: could not build the dataset: "
        "RandomImages.__init__() got an unexpected keyword argument",
    ),
    (("loss=model",), "loss=model: SmallCNN (model._target_=userpkg.cnn.SmallCNN) has no loss("),
    (("loss=output",), "loss=output: the loss has shape [16, 4], not a scalar tensor"),
    (
        ("loss.criterion._target_=userpkg.testing.TupleCriterion",),
        "(loss.criterion._target_=userpkg.testing.TupleCriterion): the loss is a tuple, not a "
        "scalar tensor",
    ),
    (
        ("data._target_=userpkg.testing.BadImages",),
        "data._target_=userpkg.testing.BadImages: reading a micro-batch of 16 samples failed "
        "in a loader worker: KeyError",
    ),
    (
        (
            "data=custom",
            "data._target_=userpkg.dict_batches.Regression",
            "model=custom",
            "model._target_=userpkg.dict_batches.Regressor",
        ),
        "loss=criterion: the batch has no target (dict(features:",
    ),
    (
        ("parallel=pipeline", "resources.gpus_per_node=2"),
        "parallel.mode=pipeline: SmallCNN (model._target_=userpkg.cnn.SmallCNN) has no "
        "pipeline_chunk(index, count)",
    ),
    (
        ("parallel=pipeline", "resources.gpus_per_node=2", "loss=output"),
        "loss=output cannot be used with parallel.mode=pipeline",
    ),
]


@pytest.mark.timeout(300)
def test_each_contract_break_is_one_line_before_the_queue(project: Path) -> None:
    for overrides, expected in BREAKS:
        result = jzk(project, "check", *overrides, f"train.micro_batch_size={MICRO}")
        assert result.returncode == 2, (overrides, result.stderr[-2000:])
        lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("jzk check: error: "), result.stderr
        assert expected in lines[0], (overrides, lines[0])

    # The same check starts every run: one line, exit 2, not retried, no worker traceback.
    t0 = time.monotonic()
    refused = jzk(project, "train", "loss=model", "resources.gpus_per_node=2")
    assert refused.returncode == 2, refused.stderr[-3000:]
    errors = [ln for ln in refused.stderr.splitlines() if "error:" in ln]
    assert len(errors) == 1 and "has no loss(output, target) method" in errors[0], errors
    assert "Traceback" not in refused.stderr and "restarting" not in refused.stderr
    assert time.monotonic() - t0 < 60

    # A dataset that fails as it is built: one line with its own error, exit 2.
    failed = jzk(project, "train", "data._target_=userpkg.testing.MissingImages")
    assert failed.returncode == 2, failed.stderr[-3000:]
    assert "building the dataset failed: FileNotFoundError: no such archive" in failed.stderr

    # A failure while the ranks join is said too: under the local launcher, torch's spawn
    # wrapper hands an escaping error to the parent without printing it (met on an H100,
    # where rank 1's NCCL init failed and the run showed no reason at all).
    if not torch.cuda.is_available():
        nccl = jzk(project, "train", "parallel.backend=nccl", "resources.gpus_per_node=2")
        assert nccl.returncode == 2, nccl.stderr[-3000:]
        errors = [ln for ln in nccl.stderr.splitlines() if "error:" in ln]
        assert (
            len(errors) == 1
            and "parallel.backend=nccl but this rank trains on the CPU" in (errors[0])
        ), nccl.stderr[-3000:]
