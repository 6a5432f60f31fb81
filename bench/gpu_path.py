"""The toolkit's GPU path below the loop, on one GPU: the process group and checkpoints.

    .venv/bin/python bench/gpu_path.py [--out DIR] [--cpu-smoke]

1. The process group as every loop joins it (distributed/process_group.py join_group):
   NCCL on a GPU, with the toolkit's timeout (parallel.timeout_minutes' default, 10), read
   back from the group, and one all-reduce through it.
2. An asynchronous checkpoint of a GPU-resident model (GPT-2 124M's shape, AdamW state,
   bf16 steps) against a synchronous one of the same state: the two saved states' digests
   (model and optimizer, loaded back into fresh copies) must equal the digest of the live
   state at the save, although the step right after the asynchronous save changes the
   weights; and how long each held the training thread (the async one: the save call
   plus the wait before that next optimizer step).
Prints one JSON line and writes DIR/gpu_path.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import GPT2_SHAPE  # noqa: E402

from jeanzay_kit.ckpt.checkpointer import Checkpointer  # noqa: E402
from jeanzay_kit.ckpt.digest import state_digest  # noqa: E402
from jeanzay_kit.ckpt.trainer_state import TrainerState  # noqa: E402
from jeanzay_kit.distributed.process_group import join_group, resolve_backend  # noqa: E402
from jeanzay_kit.distributed.ranks import RankInfo  # noqa: E402
from jeanzay_kit.examples.models import TinyGPT  # noqa: E402
from jeanzay_kit.rundir.run_directory import RunDir  # noqa: E402

SMOKE = {"block": 64, "layers": 2, "width": 64, "heads": 2, "vocab": 256}
TIMEOUT_MINUTES = 10.0  # parallel.timeout_minutes' default


def group_timeout(device: torch.device) -> str:
    """The timeout the default group's backend holds, as torch exposes it (private API:
    'unreadable' where this torch hides it)."""
    try:
        backend = dist.distributed_c10d._get_default_group()._get_backend(device)
        return str(backend.options._timeout)
    except Exception as err:  # noqa: BLE001 (a figure, not a failure)
        return f"unreadable ({type(err).__name__})"


def check_group(device: torch.device) -> dict:
    info = RankInfo(0, 0, 1, 1, 0, 1, "127.0.0.1", 29500, None)
    backend = resolve_backend("auto", device, "parallel.backend")
    join_group(info, device, backend, TIMEOUT_MINUTES)
    value = torch.ones(1, device=device)
    dist.all_reduce(value)
    return {
        "backend": dist.get_backend(),
        "timeout": group_timeout(device),
        "all_reduce_ok": float(value.item()) == 1.0,
        "nccl_version": ".".join(map(str, torch.cuda.nccl.version()))
        if device.type == "cuda"
        else None,
    }


def full_digest(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> str:
    state = {f"model.{k}": v for k, v in model.state_dict().items()}
    for index, per_param in optimizer.state_dict()["state"].items():
        for key, value in per_param.items():
            if torch.is_tensor(value):
                state[f"optim.{index}.{key}"] = value
    return state_digest(state)


def check_checkpoints(device: torch.device, shape: dict, folder: Path) -> dict:
    def fresh() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        torch.manual_seed(0)
        model = TinyGPT(shape["vocab"], shape["block"], shape["layers"], shape["width"])
        model = model.to(device)
        fused = device.type == "cuda" or None
        return model, torch.optim.AdamW(model.parameters(), lr=3e-4, fused=fused)

    model, optimizer = fresh()
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    tokens = torch.randint(0, shape["vocab"], (8, shape["block"] + 1), device=device)

    def train_step(ck: Checkpointer | None = None) -> None:
        with torch.autocast(device.type, dtype=dtype, enabled=device.type == "cuda"):
            loss = TinyGPT.loss(model(tokens[:, :-1]), tokens[:, 1:])
        loss.backward()
        if ck is not None:
            ck.before_update()  # as the training loop does before every optimizer step
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def checkpointer(name: str, use_async: bool, on: torch.nn.Module, opt) -> Checkpointer:
        return Checkpointer(
            RunDir(folder / name), on, opt, rank=0, world={"mode": "bench"}, config={"bench": True},
            device=device, keep_last=2, use_async=use_async, log=lambda _m: None,
        )  # fmt: skip

    for _ in range(3):
        train_step()
    t0 = time.perf_counter()
    train_step()
    step_s = time.perf_counter() - t0
    live = full_digest(model, optimizer)
    trainer = TrainerState(4, 0, {}, None, None)
    sync_ck = checkpointer("sync", False, model, optimizer)
    sync_ck.save(4, trainer)
    sync_s = sync_ck.last_blocking_s
    async_ck = checkpointer("async", True, model, optimizer)
    async_ck.save(4, trainer)
    call_s = async_ck.last_blocking_s
    train_step(async_ck)  # changes the weights while the save may still be writing
    blocked_s = async_ck.last_blocking_s
    async_ck.wait()
    # The first async save of a run allocates its pinned host buffers; later ones reuse
    # them: the steady cost is the second's.
    async_ck.save(5, TrainerState(5, 0, {}, None, None))
    call_again_s = async_ck.last_blocking_s
    train_step(async_ck)
    blocked_again_s = async_ck.last_blocking_s
    async_ck.wait()
    digests = {}
    for name in ("sync", "async"):
        other, other_opt = fresh()
        reader = checkpointer(name, False, other, other_opt)
        reader.load(reader.store.step_dir(4))
        digests[name] = full_digest(other, other_opt)
    state_bytes = sum(t.nbytes for t in model.state_dict().values())
    return {
        "model_params": sum(p.numel() for p in model.parameters()),
        "weights_bytes": state_bytes,
        "same_digest": digests["sync"] == digests["async"] == live,
        "digests": {"live": live[:16], **{k: v[:16] for k, v in digests.items()}},
        "sync_save_s": sync_s,
        "async_call_s": call_s,
        "async_blocking_s": blocked_s,
        "blocking_ratio": blocked_s / sync_s,
        "second_async_call_s": call_again_s,
        "second_async_blocking_s": blocked_again_s,
        "second_blocking_ratio": blocked_again_s / sync_s,
        "step_s": step_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", default=str(REPO / "bench" / "results"))
    parser.add_argument("--cpu-smoke", action="store_true")
    args = parser.parse_args()
    cuda = torch.cuda.is_available() and not args.cpu_smoke
    if not cuda and not args.cpu_smoke:
        sys.exit("gpu_path: no CUDA device")
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    report: dict = {"device": torch.cuda.get_device_name(0) if cuda else "cpu"}
    report["group"] = check_group(device)
    with tempfile.TemporaryDirectory(prefix="jzk-gpu-path-") as tmp:
        shape = GPT2_SHAPE if cuda else SMOKE
        report["checkpoint"] = check_checkpoints(device, shape, Path(tmp))
    dist.destroy_process_group()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_path.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
