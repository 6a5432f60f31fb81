"""Dense peak throughput of a GPU, for the MFU column (model FLOPs utilization). Pure.

MFU = the model's training FLOPs per second / the device's dense (no 2:4 sparsity) peak
for the math the run uses: the bf16/fp16 tensor-core peak under autocast, the TF32
tensor-core peak for fp32 with TF32 matmuls on (train.tf32), the plain FP32 peak without.

Figures in TFLOP/s from NVIDIA's data sheets, whose tensor-core figures are given with
sparsity: the dense figure is half of it.
- H100 SXM5 / H200 SXM (same Hopper GH100 compute, H200 adds HBM3e): FP32 66.9,
  TF32 494.7, BF16/FP16 989.4 (NVIDIA H100 data sheet; H200 data sheet).
- H100 PCIe: FP32 51, TF32 378, BF16/FP16 756 (H100 PCIe product brief PB-11133-001).
- H100 NVL / H200 NVL: FP32 60, TF32 417.5, BF16/FP16 835.5 (data sheets: 835 and
  1,671 with sparsity).
- A100 SXM4 and PCIe (40 and 80 GB): FP32 19.5, TF32 156, BF16/FP16 312 (A100 data sheet).
- V100 SXM2: FP32 15.7, FP16 tensor 125; V100 PCIe: 14, 112; V100S PCIe: 16.4, 130
  (V100 data sheet). Volta has neither bf16 nor TF32.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Peak:
    """One device's dense peaks, TFLOP/s. None: the device has no such math."""

    fp32: float
    tf32: float | None
    half: float  # fp16 tensor cores; bf16 where `bf16` is true
    bf16: bool = True


# Matched against torch.cuda.get_device_name() in this order: the first key whose words
# all appear in the name wins, so the specific variants come before the generic name
# ("NVIDIA H100 PCIe" before "NVIDIA H100 80GB HBM3", the SXM5 board).
PEAKS: tuple[tuple[tuple[str, ...], Peak], ...] = (
    (("H100", "PCIE"), Peak(51.0, 378.0, 756.0)),
    (("H100", "NVL"), Peak(60.0, 417.5, 835.5)),
    (("H200", "NVL"), Peak(60.0, 417.5, 835.5)),
    (("GH200",), Peak(66.9, 494.7, 989.4)),
    (("H200",), Peak(66.9, 494.7, 989.4)),
    (("H100",), Peak(66.9, 494.7, 989.4)),
    (("A100",), Peak(19.5, 156.0, 312.0)),
    (("V100S",), Peak(16.4, None, 130.0, bf16=False)),
    (("V100", "PCIE"), Peak(14.0, None, 112.0, bf16=False)),
    (("V100",), Peak(15.7, None, 125.0, bf16=False)),
)


def device_peak(device_name: str) -> Peak | None:
    """The table's row for a device name as CUDA reports it; None: not in the table."""
    # "NVIDIA A100-SXM4-80GB" and "NVIDIA H100 PCIe" alike: words, each key the start of
    # one ("V100S" starts with "V100": the table lists V100S first).
    words = device_name.upper().replace("-", " ").split()
    for keys, peak in PEAKS:
        if all(any(word.startswith(key) for word in words) for key in keys):
            return peak
    return None


def peak_flops(device_name: str, precision: str, tf32: bool) -> float | None:
    """Dense peak FLOP/s of the math a run uses on this device; None: unknown device (the
    MFU column is left out rather than guessed)."""
    peak = device_peak(device_name)
    if peak is None:
        return None
    if precision in ("bf16", "fp16"):
        if precision == "bf16" and not peak.bf16:
            return None
        return peak.half * 1e12
    if tf32 and peak.tf32 is not None:
        return peak.tf32 * 1e12
    return peak.fp32 * 1e12
