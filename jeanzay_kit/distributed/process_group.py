"""Start and stop the process group from a RankInfo. An edge module: it calls torch.distributed.

Everything is passed explicitly (init_method, rank, world size): nothing is written into
os.environ, so two groups in one test process or a library caller cannot be surprised.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from jeanzay_kit.distributed.layout import ParallelLayout
from jeanzay_kit.distributed.ranks import RankInfo
from jeanzay_kit.errors import DistSetupError


@dataclass
class DistContext:
    """What a strategy needs to know about the process group it runs in."""

    info: RankInfo
    device: torch.device
    backend: str
    mesh: DeviceMesh  # ("dp",) or ("pp", "dp"), pp outermost
    pp_rank: int
    dp_rank: int
    layout: ParallelLayout

    @property
    def dp_group(self) -> dist.ProcessGroup:
        return self.mesh.get_group("dp")

    @property
    def pp_group(self) -> dist.ProcessGroup | None:
        return self.mesh.get_group("pp") if "pp" in (self.mesh.mesh_dim_names or ()) else None

    @property
    def is_main(self) -> bool:
        return self.info.rank == 0


def pick_device(info: RankInfo, want: str, visible_devices: str | None) -> torch.device:
    """cuda:<local rank> when a GPU is visible (and wanted), else the CPU.

    srun usually shows every GPU of the node to every task (index by local rank); with
    --gpus-per-task or gpu binding each task sees one GPU (index 0).
    """
    if want == "cpu" or not torch.cuda.is_available():
        if want == "cuda":
            raise DistSetupError(
                "the cluster profile says device=cuda but no GPU is visible "
                f"(CUDA_VISIBLE_DEVICES={visible_devices!r}). HINT: request GPUs with "
                "--gres/--gpus-per-node, or use a CPU profile"
            )
        return torch.device("cpu")
    count = torch.cuda.device_count()
    if count == 1:
        index = 0
    elif info.local_rank < count:
        index = info.local_rank
    else:
        raise DistSetupError(
            f"local rank {info.local_rank} but only {count} GPUs are visible "
            f"(CUDA_VISIBLE_DEVICES={visible_devices!r}). HINT: one task per GPU: "
            "--ntasks-per-node equal to the GPUs per node"
        )
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def resolve_backend(backend: str, device: torch.device, key: str) -> str:
    """auto: NCCL on a GPU, gloo on the CPU; NCCL asked for on the CPU is refused naming
    `key` (parallel.backend, or a session's backend=)."""
    if backend == "auto":
        return "nccl" if device.type == "cuda" else "gloo"
    if backend == "nccl" and device.type != "cuda":
        raise DistSetupError(
            f"{key}=nccl but this rank trains on the CPU (no GPU visible, or "
            "cluster.device=cpu): NCCL only joins GPUs. HINT: "
            f"{key}=auto picks gloo on the CPU and NCCL on GPUs"
        )
    return backend


def join_group(
    info: RankInfo,
    device: torch.device,
    backend: str,
    timeout_minutes: float,
    store: dist.Store | None = None,
) -> bool:
    """Join the job's process group, unless the process is in one already: the one place
    a process group is made (the toolkit's loop through init_distributed, a session's,
    `jzk doctor`'s probe with the store its ranks checked in at). backend: as
    resolve_backend returned it. True when this call made the group (its owner leaves
    it)."""
    if dist.is_initialized():
        return False
    # One process, started by hand: an in-process store, no port to collide on. A Slurm
    # step's ranks meet on the job's port, or the next free one (distributed/rendezvous.py).
    alone = info.launcher == "local" and info.world_size == 1
    timeout = timedelta(minutes=timeout_minutes)
    if store is None and alone:
        store = dist.HashStore()
    if store is None and info.launcher == "srun" and info.world_size > 1:
        from jeanzay_kit.distributed.rendezvous import rendezvous_store

        store = rendezvous_store(info, timeout)
    dist.init_process_group(
        backend=backend,
        init_method=None if store is not None else info.init_method,
        store=store,
        rank=info.rank,
        world_size=info.world_size,
        timeout=timeout,
        device_id=device if device.type == "cuda" else None,
    )
    return True


def init_distributed(
    info: RankInfo,
    layout: ParallelLayout,
    device: torch.device,
    backend: str = "auto",
    timeout_minutes: float = 10.0,
) -> DistContext:
    """Join the job's process group and build its device mesh."""
    if info.world_size != layout.world_size:
        raise DistSetupError(
            f"this job has {info.world_size} tasks ({info.launcher}) but the config asks for "
            f"world size {layout.world_size} (resources.nodes x resources.gpus_per_node). "
            "HINT: submit with the script `jzk render` writes, or make --nodes and "
            "--ntasks-per-node match the config"
        )
    backend = resolve_backend(backend, device, "parallel.backend")
    join_group(info, device, backend, timeout_minutes)
    if layout.pp_size > 1:
        mesh = init_device_mesh(
            device.type, (layout.pp_size, layout.dp_size), mesh_dim_names=("pp", "dp")
        )
        pp_rank, dp_rank = mesh.get_coordinate() or (0, 0)
    else:
        mesh = init_device_mesh(device.type, (layout.world_size,), mesh_dim_names=("dp",))
        pp_rank, dp_rank = 0, info.rank
    return DistContext(info, device, backend, mesh, pp_rank, dp_rank, layout)


def shutdown(clean: bool = True) -> None:
    """Leave the group. After a clean run the ranks leave together: one that tears its
    connections down while a peer still talks to it (a late pipeline send) makes the
    peer abort. After a failure there is no waiting for peers that may be stuck."""
    if dist.is_initialized():
        if clean:
            dist.barrier()
        dist.destroy_process_group()
