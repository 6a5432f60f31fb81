"""W&B and MLflow follow the run: one tracker run per run directory, each step once.

The real packages (the `trackers` extra), W&B offline as on a compute node, MLflow's
default file store in the run directory; `python train.py` stopped by Ctrl-C, then run
again, as a user does. W&B's offline history is read back from its `.wandb` files (a
LevelDB-style log of protobuf records, the format `wandb sync` uploads).
"""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.distributed.conftest import REPO

wandb_pb = pytest.importorskip("wandb.proto.wandb_internal_pb2")
mlflow_client = pytest.importorskip("mlflow.tracking")

STEPS = 30
BASE = (
    f"train.steps={STEPS}",
    "train.log_every=2",
    "train.eval_every=0",
    "checkpoint.every_steps=10",
)


def train(run_dir: Path, *overrides: str, stop_at: int = 0) -> subprocess.CompletedProcess:
    """`python train.py`; with stop_at, Ctrl-C (SIGINT) once metrics.jsonl reaches it."""
    args = [sys.executable, "train.py", *BASE, *overrides, f"hydra.run.dir={run_dir}"]
    proc = subprocess.Popen(
        args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    metrics = run_dir / "metrics.jsonl"
    deadline = time.monotonic() + 200
    while stop_at and proc.poll() is None and time.monotonic() < deadline:
        lines = metrics.read_text().splitlines() if metrics.exists() else []
        if lines and json.loads(lines[-1]).get("step", 0) >= stop_at:
            proc.send_signal(signal.SIGINT)
            break
        time.sleep(0.01)
    out, err = proc.communicate(timeout=240)
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def wandb_records(path: Path) -> Iterator[object]:
    """The protobuf records of a `.wandb` file: a 7-byte header (":W&B", magic, version),
    then LevelDB log records in 32 KiB blocks, each chunk with a 7-byte header
    (crc32, length, type: 1 full, 2 first, 3 middle, 4 last)."""
    data, block = path.read_bytes(), 32768
    assert data[:4] == b":W&B"
    pos, pending = 7, b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        pending += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            record = wandb_pb.Record()
            record.ParseFromString(pending)
            pending = b""
            yield record


def wandb_history(folder: Path) -> list[tuple[int, float]]:
    """(step, loss) of every history record of one offline run folder."""
    (log,) = folder.glob("run-*.wandb")
    out = []
    for record in wandb_records(log):
        if record.WhichOneof("record_type") == "history":
            # A key is in `key` or in `nested_key` (W&B writes either).
            items = {i.key or "/".join(i.nested_key): i.value_json for i in record.history.item}
            if "loss" not in items:  # W&B's own closing record (_runtime, _timestamp)
                assert not [k for k in items if not k.startswith("_")], items
                continue
            out.append((record.history.step.num, float(items["loss"])))
    return out


@pytest.mark.timeout(300)
def test_a_stopped_and_resumed_run_is_one_tracker_run_with_every_step_once(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "run"
    os.environ.pop("WANDB_MODE", None)
    # Attempt 1: W&B only, stopped by Ctrl-C (saved at the step it stops at).
    first = train(run_dir, "metrics.wandb=true", stop_at=12)
    assert first.returncode == 3, first.stderr[-3000:]
    state = json.loads((run_dir / "trackers.json").read_text())
    wandb_id, stopped_at = state["wandb"]["id"], state["wandb"]["step"]
    assert 12 <= stopped_at < STEPS
    assert f"wandb sync --id {wandb_id} --project jzk" in first.stderr
    # Attempt 2: resumed, MLflow turned on too: it gets the kept steps first.
    second = train(run_dir, "metrics.wandb=true", "metrics.mlflow=true")
    assert second.returncode == 0, second.stderr[-3000:]
    assert "resumed from" in second.stdout
    # The run's output stays in train.log, each start marked, each line labelled.
    jzk = str(Path(sys.executable).parent / "jzk")
    logs = [jzk, "logs", str(run_dir), "--rank", "0", "--attempt"]
    first_log = subprocess.run([*logs, "1"], capture_output=True, text=True).stdout
    second_log = subprocess.run([*logs, "2"], capture_output=True, text=True).stdout
    assert "SIGINT received: saved step-" in first_log and "resumed from" not in first_log
    assert "resumed from" in second_log and f"done: {STEPS} steps" in second_log

    logged = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    expected = [(r["step"], r["loss"]) for r in logged]
    assert [s for s, _ in expected] == list(range(2, STEPS + 1, 2))

    # W&B: one id in two offline folders (one per attempt), every step once, in order.
    state = json.loads((run_dir / "trackers.json").read_text())
    assert state["wandb"] == {"id": wandb_id, "step": STEPS}
    folders = sorted((run_dir / "wandb").glob("offline-run-*"))
    assert [f.name.rsplit("-", 1)[1] for f in folders] == [wandb_id, wandb_id]
    history = [h for f in folders for h in wandb_history(f)]
    assert [s for s, _ in history] == [s for s, _ in expected]
    assert [v for _, v in history] == pytest.approx([v for _, v in expected])
    assert "wandb sync --id" in second.stderr and str(folders[1]) in second.stderr

    # MLflow: one run in the run directory's file store, backfilled from step 2.
    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
    client = mlflow_client.MlflowClient(tracking_uri=(run_dir / "mlruns").as_uri())
    (experiment,) = [e for e in client.search_experiments() if e.name == "jzk"]
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_id == state["mlflow"]["id"] and run.info.status == "FINISHED"
    losses = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, "loss"))
    assert [s for s, _ in losses] == [s for s, _ in expected]
    assert [v for _, v in losses] == pytest.approx([v for _, v in expected])
    assert run.data.params["train.steps"] == str(STEPS)
    assert run.data.params["jzk.run_dir"] == str(run_dir)
