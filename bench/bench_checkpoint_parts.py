"""The parts behind bench_checkpoint.py's figures, each against its alternative, same run.

    .venv/bin/python bench/bench_checkpoint_parts.py [--rounds 7] [--dir DIR]

1. DCP writers on the bench state (403 MB, 4 threads, checksums on the way, fsync):
   DCP's stock FileSystemWriter (a torch.save record per tensor) vs ours (raw bytes,
   ckpt/raw_storage.py), each with and without the writeback hint of ckpt/hashing_fs.py,
   and `dd oflag=direct` of the same size; the sides take turns in every round, in a
   rotating order. MB/s, medians and every round.
2. Staging copies for an asynchronous save on CPU: how long the training thread is held
   up by Checkpointer's async save (the call + the wait before the optimizer step) with
   DCP's DefaultStager vs our CpuCopyStager, in turns. DefaultStager copies with
   UntypedStorage.copy_, which holds the GIL for each copy; ours with Tensor.copy_.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402
from torch.distributed.checkpoint import FileSystemWriter  # noqa: E402
from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions  # noqa: E402

from jeanzay_kit.ckpt import hashing_fs  # noqa: E402
from jeanzay_kit.ckpt.checkpointer import state_dicts  # noqa: E402
from jeanzay_kit.ckpt.hashing_fs import HashingFileSystem  # noqa: E402
from jeanzay_kit.ckpt.raw_storage import RawWriter  # noqa: E402
from jeanzay_kit.examples.models import MLP  # noqa: E402

THREADS = 4


def bench_state(hidden: int = 2048, depth: int = 6) -> dict:
    """The state bench_checkpoint.py saves: MLP weights + AdamW moments."""
    model = MLP(in_dim=hidden, hidden=hidden, depth=depth, out_dim=hidden)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(64, hidden)).square().mean().backward()
    opt.step()
    model_sd, optim_sd = state_dicts(model, opt)
    return {"model": model_sd, "optim": optim_sd}


def _save(state: dict, writer) -> None:  # noqa: ANN001 - a DCP StorageWriter
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.save(state, storage_writer=writer, no_dist=True)


def writers(state: dict, base: Path, rounds: int) -> dict[str, list[float]]:
    nbytes = sum(t.nbytes for part in state.values() for t in part.values() if torch.is_tensor(t))
    default_every = hashing_fs.WRITEBACK_EVERY

    def stock(path: Path) -> None:
        writer = FileSystemWriter(str(path), thread_count=THREADS, sync_files=True)
        writer.fs = HashingFileSystem()
        _save(state, writer)

    def raw(path: Path) -> None:
        _save(state, RawWriter(path, THREADS))

    def no_hint(save: Callable[[Path], None]) -> Callable[[Path], None]:
        def run(path: Path) -> None:
            hashing_fs.WRITEBACK_EVERY = 1 << 62  # never reached: no writeback hint
            try:
                save(path)
            finally:
                hashing_fs.WRITEBACK_EVERY = default_every

        return run

    def dd(path: Path) -> None:
        count = max(1, nbytes // (4 << 20))
        args = [f"of={path / 'dd.bin'}", "bs=4M", f"count={count}", "oflag=direct"]
        subprocess.run(["dd", "if=/dev/zero", *args, "conv=fsync"], check=True, capture_output=True)

    sides = {
        "dd oflag=direct": dd,
        "stock DCP writer": no_hint(stock),
        "stock DCP writer + writeback hint": stock,
        "raw writer": no_hint(raw),
        "raw writer + writeback hint (ours)": raw,
    }
    results: dict[str, list[float]] = {name: [] for name in sides}
    names = list(sides)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            with tempfile.TemporaryDirectory(dir=base) as tmp:
                t0 = time.perf_counter()
                sides[name](Path(tmp))
                results[name].append(nbytes / (time.perf_counter() - t0) / 1e6)
    return results


def staging(hidden: int, rounds: int, base: Path) -> dict[str, list[float]]:
    """ms the training thread is held up by an asynchronous save (the save call + the
    wait in before_update), with each stager in the Checkpointer, in turns."""
    import torch.distributed as dist

    from jeanzay_kit.ckpt.checkpointer import Checkpointer
    from jeanzay_kit.ckpt.trainer_state import TrainerState
    from jeanzay_kit.node.local import free_port
    from jeanzay_kit.rundir.run_directory import RunDir

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1
    )
    model = MLP(in_dim=hidden, hidden=hidden, depth=6, out_dim=hidden)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = torch.randn(64, hidden)
    options = StagingOptions(
        use_pinned_memory=False,
        use_shared_memory=False,
        use_async_staging=True,
        use_non_blocking_copy=False,
    )
    makers = {"DCP DefaultStager": lambda: DefaultStager(options), "CpuCopyStager (ours)": None}
    results: dict[str, list[float]] = {name: [] for name in makers}
    with tempfile.TemporaryDirectory(dir=base) as tmp:
        checkpointers = {}
        for name, make in makers.items():
            ck = Checkpointer(
                RunDir(Path(tmp) / name.split()[0]),
                model,
                opt,
                rank=0,
                world={"m": 1},
                config={"b": 1},
                device=torch.device("cpu"),
                keep_last=1,
                use_async=True,
                log=lambda _m: None,
            )
            if make is not None:  # the other stager in the Checkpointer's background save
                assert ck._background is not None and ck._background._stager is not None
                ck._background._stager.close()
                ck._background._stager = make()
            checkpointers[name] = ck

        def train_step(ck: Checkpointer) -> None:
            model(data).square().mean().backward()
            ck.before_update()
            opt.step()
            opt.zero_grad(set_to_none=True)

        for r in range(rounds + 1):  # round 0 allocates the staging buffers: not counted
            for name, ck in checkpointers.items():
                train_step(ck)
                ck.save(r + 1, TrainerState(r + 1, 0, {}, None, None))
                train_step(ck)
                ck.wait()
                if r:
                    results[name].append(ck.last_blocking_s * 1e3)
        for ck in checkpointers.values():
            ck.close()
    dist.destroy_process_group()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--dir", default=None, help="a folder on the filesystem to measure")
    args = parser.parse_args()
    base = Path(args.dir) if args.dir else REPO / "bench" / "results"
    base.mkdir(parents=True, exist_ok=True)
    state = bench_state()
    print(f"1. DCP writers, {THREADS} threads, MB/s (median; rounds)")
    for name, values in writers(state, base, args.rounds).items():
        print(f"   {name:36s} {statistics.median(values):6.0f}   {[round(v) for v in values]}")
    print("2. async save: training thread held up (save call + staging wait), ms")
    for name, values in staging(2048, args.rounds, base).items():
        print(f"   {name:36s} {statistics.median(values):6.1f}   {[round(v, 1) for v in values]}")


if __name__ == "__main__":
    main()
