"""The GPU defaults of the toolkit's loop, each one key (docs/performance.md, "GPU
defaults"): TF32 matmuls (train.tf32), torch.compile (train.compile=auto), the fused
optimizer kernels (optim.fused=auto). On the CPU auto turns nothing on: the CPU path
stays the one the digests were measured on."""

from __future__ import annotations

import torch

# Modes whose strategy compiles the model (train/strategies/ddp.py, fsdp.py).
from jeanzay_kit.config.modes import COMPILE_MODES


def apply_tf32(tf32: bool, device: torch.device) -> None:
    """TF32 tensor cores for fp32 matmuls and cuDNN convolutions on CUDA (about 3x fp32
    on A100/H100 for the parts of a bf16 run autocast leaves in fp32, and for fp32 runs).
    "high" is torch's name for TF32-or-better; "highest" keeps full fp32."""
    if device.type != "cuda":
        return
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    torch.backends.cudnn.allow_tf32 = tf32


def compile_wanted(setting: bool | None, device: torch.device, mode: str) -> bool:
    """train.compile: as set; auto (None) compiles on CUDA for the modes that compile."""
    if setting is not None:
        return setting
    return device.type == "cuda" and mode in COMPILE_MODES


def fused_wanted(setting: bool | None, device: torch.device) -> bool:
    """optim.fused: as set; auto (None) on CUDA, where torch's fused AdamW/SGD kernels
    update every parameter in a few launches instead of several per tensor."""
    if setting is not None:
        return setting
    return device.type == "cuda"
