"""The GPUs of this machine, counted before anything is decided about a local run. Edge:
it looks for NVIDIA's driver and, only where there is one, asks torch.

`jzk validate`/`jzk submit` (launch/request.py) and the node entry point (node/entry.py)
both size a local run's workers from it.
"""

from __future__ import annotations

from pathlib import Path


def nvidia_driver_present() -> bool:
    return Path("/proc/driver/nvidia").exists() or Path("/dev/nvidiactl").exists()


def local_gpu_count() -> int:
    # Without NVIDIA's driver there is no CUDA device: say so without importing torch
    # (~2 s on a small machine), so refusals such as a changed config come at once.
    if not nvidia_driver_present():
        return 0
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0
