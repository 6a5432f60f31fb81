"""What `jzk doctor` runs on every rank: check in, gather the rank table, one all-reduce
that must answer within a timeout, and the bandwidth tests. An edge module
(torch.distributed); the conclusions are drawn in doctor/table.py.

Each stage names who did not answer instead of hanging in a collective:
1. check-in: every rank writes its key into rank 0's TCPStore; rank 0 names the ranks
   missing after the timeout (a task that never started, or cannot reach the master);
2. monitored_barrier (gloo, also on an NCCL job): names the ranks that joined the group
   but stopped answering;
3. a one-element all-reduce waited on with the timeout, its sum checked;
4. bus bandwidth of an all-reduce of --size-mb over the whole world, then per rank from
   the pair rounds of doctor/table.py.
Before them rank 0 says which torch the job runs against the range the toolkit was
tested with, and outside it how to go back (torch_version.py).
"""

from __future__ import annotations

import os
import socket
import sys
import time
from dataclasses import asdict
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from jeanzay_kit.distributed.process_group import join_group, pick_device, resolve_backend, shutdown
from jeanzay_kit.distributed.ranks import RankInfo
from jeanzay_kit.doctor.table import (
    RankFacts,
    bus_bandwidth,
    format_rank_table,
    gbps,
    pair_rounds,
    rank_figures,
    slow_ranks,
)
from jeanzay_kit.errors import DoctorError
from jeanzay_kit.torch_version import torch_range_line

WARMUP = 2
# Rank 0's line when every rank answered (`jzk doctor --submit --wait` looks for it).
HEALTHY = "every rank answered"


def _check_in(info: RankInfo, timeout_s: float) -> dist.TCPStore:
    store = dist.TCPStore(
        info.master_addr,
        info.master_port,
        world_size=None,
        is_master=info.rank == 0,
        timeout=timedelta(seconds=timeout_s),
        wait_for_workers=False,
    )
    store.set(f"doctor/in/{info.rank}", socket.gethostname())
    if info.rank != 0:
        store.wait(["doctor/go"], timedelta(seconds=timeout_s + 30))
        return store
    deadline = time.monotonic() + timeout_s
    keys = [f"doctor/in/{r}" for r in range(info.world_size)]
    while True:
        missing = [r for r, key in enumerate(keys) if not store.check([key])]
        if not missing:
            break
        if time.monotonic() > deadline:
            raise DoctorError(
                f"rank(s) {_names(missing)} of {info.world_size} did not check in within "
                f"{timeout_s:g} s at {info.master_addr}:{info.master_port}. HINT: their task "
                "did not start, or cannot reach the master (firewall, wrong interface); "
                "look at their node's log"
            )
        time.sleep(0.2)
    store.set("doctor/go", "1")
    return store


def _names(ranks: list[int]) -> str:
    return ", ".join(str(r) for r in ranks)


def _facts(info: RankInfo, device: torch.device, visible: str | None) -> RankFacts:
    name = str(device)
    if device.type == "cuda":
        name += f" ({torch.cuda.get_device_name(device)})"
    return RankFacts(
        rank=info.rank,
        local_rank=info.local_rank,
        node_rank=info.node_rank,
        host=socket.gethostname(),
        pid=os.getpid(),
        devices=visible if visible else "-",
        device=name,
        cpus=tuple(sorted(os.sched_getaffinity(0))),
        master=f"{info.master_addr}:{info.master_port}",
    )


def _timed_all_reduce(tensor: torch.Tensor, group: dist.ProcessGroup | None, iters: int) -> float:
    """Seconds per all-reduce, after warm-up."""
    for _ in range(WARMUP):
        dist.all_reduce(tensor, group=group)
    if tensor.is_cuda:
        torch.cuda.synchronize(tensor.device)
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(tensor, group=group)
    if tensor.is_cuda:
        torch.cuda.synchronize(tensor.device)
    return (time.perf_counter() - start) / iters


def probe_rank(
    info: RankInfo,
    want_device: str,
    visible: str | None,
    *,
    backend: str = "auto",
    timeout_s: float = 60.0,
    size_mb: float = 16.0,
    iters: int = 5,
    out=None,  # noqa: ANN001 - a text stream; stdout by default
) -> int:
    """Run every check on this rank; rank 0 prints the table. Returns the exit code
    (0: healthy, possibly with SLOW ranks flagged); raises DoctorError on a failed check."""
    out = out or sys.stdout
    if info.rank == 0:  # first: a torch outside the tested range may be why a check fails
        print(torch_range_line(torch.__version__), file=out, flush=True)
    device = pick_device(info, want_device, visible)
    backend = resolve_backend(backend, device, "--backend")
    store = _check_in(info, timeout_s)
    # The job's one way into a process group, on the store the ranks checked in at.
    join_group(info, device, backend, timeout_s / 60, store=dist.PrefixStore("pg", store))
    try:
        return _checks(
            info,
            device,
            visible,
            backend=backend,
            timeout_s=timeout_s,
            size_mb=size_mb,
            iters=iters,
            out=out,
        )
    finally:
        shutdown(clean=False)  # a check that failed leaves no peer to wait for


def _checks(
    info: RankInfo,
    device: torch.device,
    visible: str | None,
    *,
    backend: str,
    timeout_s: float,
    size_mb: float,
    iters: int,
    out,  # noqa: ANN001
) -> int:
    world = info.world_size
    # monitored_barrier exists on gloo only: an NCCL job gets a gloo group beside it.
    gloo = dist.new_group(backend="gloo") if backend != "gloo" else None
    try:
        dist.monitored_barrier(gloo, timeout=timedelta(seconds=timeout_s), wait_all_ranks=True)
    except RuntimeError as err:
        # Rank 0's message lists the ranks that did not reach the barrier.
        raise DoctorError(
            f"rank {info.rank}: a rank stopped answering after it checked in: {err}. HINT: "
            "the ranks torch names above are stuck or dead: read their task's log (srun "
            "labels lines with the task number), or run again with a larger --timeout if "
            "their host is only slow"
        ) from err

    gathered: list = [None] * world
    dist.all_gather_object(gathered, asdict(_facts(info, device, visible)), group=gloo)
    facts = [RankFacts(**{**f, "cpus": tuple(f["cpus"])}) for f in gathered]
    _check_sum(info, device, timeout_s)
    nbytes = max(4, int(size_mb * 2**20)) // 4 * 4
    world_bw: float | None = None
    figures: list[float | None] = [None] * world
    if world > 1:
        world_bw, figures = _bandwidths(info, device, backend, gloo, nbytes, iters)
    if info.rank == 0:
        _print_table(facts, figures, (world_bw, nbytes, timeout_s, backend), out)
    return 0


def _check_sum(info: RankInfo, device: torch.device, timeout_s: float) -> None:
    """One all-reduce of each rank's number: it ends in time and sums right."""
    world = info.world_size
    ones = torch.full((1,), float(info.rank + 1), device=device)
    work = dist.all_reduce(ones, async_op=True)
    if not work.wait(timeout=timedelta(seconds=timeout_s)):
        raise DoctorError(f"rank {info.rank}: the all-reduce did not finish in {timeout_s:g} s")
    expected = world * (world + 1) / 2
    if ones.item() != expected:
        raise DoctorError(
            f"rank {info.rank}: the all-reduce summed to {ones.item():g}, not {expected:g}. "
            "HINT: a broken interconnect or driver on this rank's host"
        )


def _bandwidths(
    info: RankInfo, device: torch.device, backend: str, gloo: Any, nbytes: int, iters: int
) -> tuple[float, list[float | None]]:
    """The whole world's all-reduce bus bandwidth, and each rank's best pair figure."""
    world = info.world_size
    payload = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
    world_bw = bus_bandwidth(nbytes, _timed_all_reduce(payload, None, iters), world)
    per_round = []
    for pairs in pair_rounds(world):
        mine, _ = dist.new_subgroups_by_enumeration(pairs, backend=backend)
        measured = {}
        if mine is not None:
            measured = {
                info.rank: bus_bandwidth(nbytes, _timed_all_reduce(payload, mine, iters), 2)
            }
        dist.barrier()  # one round at a time: rounds must not share links
        round_figures: list = [None] * world
        dist.all_gather_object(round_figures, measured, group=gloo)
        per_round.append({r: v for m in round_figures for r, v in m.items()})
    return world_bw, rank_figures(world, per_round)


def _print_table(
    facts: list[RankFacts],
    figures: list[float | None],
    run: tuple[float | None, int, float, str],
    out: Any,
) -> None:
    """Rank 0's report: the table, the all-reduce figures, the SLOW ranks."""
    world_bw, nbytes, timeout_s, backend = run
    world = len(facts)
    slow = slow_ranks(figures)
    print(f"jzk doctor: {world} rank(s), backend {backend}", file=out)
    print(format_rank_table(facts, figures if world > 1 else (), slow), file=out)
    print(
        f"\ncheck-in, barrier and a {world}-rank all-reduce: {HEALTHY} within "
        f"{timeout_s:g} s, sum correct",
        file=out,
    )
    if world_bw is not None:
        print(
            f"all-reduce of {nbytes / 2**20:g} MiB over {world} ranks: bus bandwidth "
            f"{gbps(world_bw)} GB/s; per rank: the better of its pair tests",
            file=out,
        )
    for rank in slow:
        host = next(f.host for f in facts if f.rank == rank)
        print(
            f"SLOW: rank {rank} on {host}: {gbps(figures[rank])} GB/s, under 0.7x the "
            "median of the ranks",
            file=out,
        )
    out.flush()
