"""Issue 36's GPU defaults, as far as they are decided without a GPU: the peak table,
the micro-batch search and its trial (a fake memory limit), the keys and their auto."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
import torch
from torch import nn

from jeanzay_kit.config.compose import compose_config
from jeanzay_kit.config.micro_batch_rules import (
    auto_options,
    candidates,
    explain,
    largest_fitting,
)
from jeanzay_kit.config.spec import build_job_spec
from jeanzay_kit.errors import JzkError
from jeanzay_kit.rundir.run_directory import RunDir
from jeanzay_kit.runtime.peaks import device_peak, peak_flops
from jeanzay_kit.train import micro_batch
from jeanzay_kit.train.gpu_settings import compile_wanted, fused_wanted

CUDA, CPU = torch.device("cuda", 0), torch.device("cpu")


@pytest.mark.parametrize(
    ("name", "precision", "tf32", "tflops"),
    [
        # Names as torch.cuda.get_device_name() reports them.
        ("NVIDIA H100 80GB HBM3", "bf16", True, 989.4),  # SXM5 (Jean Zay's H100)
        ("NVIDIA H100 80GB HBM3", "fp32", True, 494.7),
        ("NVIDIA H100 80GB HBM3", "fp32", False, 66.9),
        ("NVIDIA H100 PCIe", "bf16", True, 756.0),
        ("NVIDIA H100 NVL", "bf16", True, 835.5),
        ("NVIDIA H200", "bf16", True, 989.4),
        ("NVIDIA H200 NVL", "fp16", True, 835.5),
        ("NVIDIA A100-SXM4-80GB", "bf16", True, 312.0),
        ("NVIDIA A100-PCIE-40GB", "fp32", True, 156.0),
        ("Tesla V100-SXM2-32GB", "fp16", True, 125.0),
        ("Tesla V100-SXM2-16GB", "fp32", True, 15.7),  # Volta has no TF32
        ("Tesla V100-PCIE-32GB", "fp16", True, 112.0),
        ("Tesla V100S-PCIE-32GB", "fp16", True, 130.0),
    ],
)
def test_the_peak_follows_the_device_and_the_math(
    name: str, precision: str, tf32: bool, tflops: float
) -> None:
    assert peak_flops(name, precision, tf32) == pytest.approx(tflops * 1e12)


def test_an_unknown_device_or_math_it_lacks_has_no_peak() -> None:
    assert device_peak("NVIDIA GeForce RTX 4090") is None
    assert peak_flops("NVIDIA GeForce RTX 4090", "bf16", True) is None
    assert peak_flops("Tesla V100-SXM2-32GB", "bf16", True) is None  # no bf16 on Volta


@pytest.mark.parametrize(
    ("per_replica", "split", "expected"),
    [(32, 1, [1, 2, 4, 8, 16, 32]), (24, 1, [1, 2, 3, 4, 6, 8, 12, 24]), (24, 4, [4, 8, 12, 24])],
)
def test_candidates_keep_the_global_batch_exact(per_replica, split, expected) -> None:
    assert candidates(per_replica, split) == expected


@pytest.mark.parametrize(
    ("global_batch", "dp", "mode", "gpn", "expected"),
    [
        (48, 2, "ddp", 4, [1, 2, 3, 4, 6, 8, 12, 24]),
        (48, 1, "dataparallel", 4, [4, 8, 12, 16, 24, 48]),
        (33, 2, "ddp", 2, []),  # not a whole share per replica
        (6, 1, "dataparallel", 4, []),  # no multiple of 4 divides 6
    ],
)
def test_auto_options_are_the_validations_and_the_runs(global_batch, dp, mode, gpn, expected):
    assert auto_options(global_batch, dp, mode, gpn) == expected


@pytest.mark.parametrize(
    ("per_replica", "limit", "chosen"),
    [
        (64, 1000, 64),  # everything fits: one micro-batch per replica
        (64, 20, 16),  # doubling stops at 32, bisection finds 16
        (96, 40, 32),  # 1, 2, 4, 8, 16, 32, 48 fails, 32 fits
        (96, 11, 8),
        (7, 3, 1),  # a prime: 1 or 7
        (64, 0, 0),  # nothing fits
    ],
)
def test_the_search_finds_the_largest_size_under_a_memory_limit(per_replica, limit, chosen):
    options = candidates(per_replica)
    tried: list[int] = []

    def fits(m: int) -> bool:
        tried.append(m)
        return m <= limit

    got, log = largest_fitting(options, fits)
    assert got == chosen
    assert len(tried) == len(set(tried)), "a size was tried twice"
    assert len(tried) <= 2 * len(options).bit_length() + 1, tried
    if chosen:
        assert str(chosen) in explain(got, per_replica, log, "H100")


class Tiny(nn.Module):
    """A user's model under a fake memory limit: a batch above it fails as CUDA's
    allocator does, with torch.OutOfMemoryError, in the middle of the forward."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit
        self.layer = nn.Linear(4, 4)
        self.drop = nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.drop(self.layer(x))
        if x.shape[0] > self.limit:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return h


class FakeMemory:
    """The GPU's memory with a fake capacity: the peak is what the test says a size costs."""

    device = CPU

    def __init__(self, capacity: int, per_sample: int) -> None:
        self.capacity_bytes, self.per_sample, self.last = capacity, per_sample, 0

    def capacity(self) -> int:
        return self.capacity_bytes

    def reset(self) -> None:
        pass

    def peak(self) -> int:
        return self.last * self.per_sample

    def name(self) -> str:
        return "a fake GPU"


def _trial(model: Tiny, memory: FakeMemory) -> micro_batch.Trial:
    def make_batch(size: int) -> torch.Tensor:
        memory.last = size
        return torch.ones(size, 4)

    return micro_batch.Trial(
        model,
        lambda module, batch: module(batch).pow(2).mean(),
        contextlib.nullcontext,
        make_batch,
        memory,
    )


@pytest.mark.parametrize(
    ("oom_above", "capacity", "chosen"),
    [(12, 10**9, 8), (64, 10**9, 64), (64, 100 * 24, 16)],
    ids=["out-of-memory-error", "fits-whole", "over-the-headroom"],
)
def test_a_trial_recovers_from_out_of_memory_and_leaves_the_model_as_it_was(
    oom_above: int, capacity: int, chosen: int
) -> None:
    torch.manual_seed(0)
    model = Tiny(oom_above)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()
    size, line = micro_batch.search(_trial(model, FakeMemory(capacity, 100)), candidates(64))
    assert size == chosen, line
    assert f"auto: {chosen} " in line
    assert all(p.grad is None for p in model.parameters()), "the trial left gradients"
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert torch.equal(torch.get_rng_state(), rng), "the dropout draws were not put back"


def test_nothing_fitting_is_one_error_naming_the_key() -> None:
    with pytest.raises(JzkError, match=r"train.micro_batch_size=auto: not even 1 sample.*HINT"):
        micro_batch.search(_trial(Tiny(0), FakeMemory(10**9, 1)), candidates(8))


def _spec(*overrides: str):
    return build_job_spec(compose_config(list(overrides)), local_gpus=0, local_cpus=2)


def test_auto_is_chosen_once_recorded_and_taken_again_on_resume(tmp_path: Path) -> None:
    spec = _spec("train.micro_batch_size=auto", "train.global_batch_size=48")
    assert spec.train.micro_batch_auto and spec.train.micro_batch_size == 24  # the bound
    calls = []

    def make_trial() -> micro_batch.Trial:
        calls.append(1)
        return _trial(Tiny(7), FakeMemory(10**9, 1))

    assert micro_batch.choose_on_rank0(spec, RunDir(tmp_path), make_trial) == 6
    assert json.loads((tmp_path / "micro_batch.json").read_text())["micro_batch_size"] == 6
    # The resumed run takes the recorded size without measuring again...
    assert micro_batch.choose_on_rank0(spec, RunDir(tmp_path), make_trial) == 6
    assert len(calls) == 1
    # ...unless it no longer divides the per-replica batch (another number of GPUs).
    other = _spec("train.micro_batch_size=auto", "train.global_batch_size=40")
    assert micro_batch.choose_on_rank0(other, RunDir(tmp_path), make_trial) == 5
    settled = micro_batch.with_micro_batch(spec, 6)
    assert (settled.train.micro_batch_size, settled.train.grad_accum_steps) == (6, 4)
    assert settled.eval.micro_batch_size == 6


def test_auto_on_the_cpu_takes_the_default_size(tmp_path: Path) -> None:
    spec = _spec("train.micro_batch_size=auto", "train.global_batch_size=36")
    assert micro_batch.choose_on_rank0(spec, RunDir(tmp_path), None) == 6  # 18 per replica
    spec = _spec("train.micro_batch_size=auto")
    assert micro_batch.for_check(spec).train.micro_batch_size == 8


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (("train.micro_batch_size=auto", "parallel=fsdp"), "parallel.mode=fsdp splits the model"),
        (("train.micro_batch_size=auto", "parallel=pipeline"), "parallel.mode=pipeline splits"),
        (("train.micro_batch_size=auto", "train.global_batch_size=33"), "not divisible"),
        (("train.micro_batch_size=big",), "train.micro_batch_size=big"),
        (("train.compile=sometimes",), "train.compile=sometimes is not true, false or auto"),
        (("optim.fused=maybe",), "optim.fused=maybe is not true, false or auto"),
        (("train.tf32=auto",), "train.tf32=auto is not true or false"),
    ],
)
def test_a_wrong_gpu_setting_is_refused_naming_its_key(overrides, message) -> None:
    with pytest.raises(JzkError, match=message.replace(".", r"\.")):
        _spec(*overrides)


def test_auto_turns_on_on_cuda_only_and_one_override_turns_it_off() -> None:
    spec = _spec()
    assert spec.train.compile is None and spec.optim.fused is None and spec.train.tf32
    assert compile_wanted(None, CUDA, "ddp") and compile_wanted(None, CUDA, "fsdp")
    assert not compile_wanted(None, CUDA, "pipeline")
    assert not compile_wanted(None, CPU, "ddp")
    assert not compile_wanted(False, CUDA, "ddp")
    assert fused_wanted(None, CUDA) and not fused_wanted(None, CPU)
    assert not fused_wanted(False, CUDA)
    off = _spec("train.compile=false", "optim.fused=false", "train.tf32=false")
    assert (off.train.compile, off.optim.fused, off.train.tf32) == (False, False, False)


def test_a_models_flops_are_per_sample_or_per_token_times_the_tokens() -> None:
    from jeanzay_kit.train.loop import flops_per_sample

    class PerSample(nn.Module):
        def flops_per_sample(self) -> float:
            return 600.0

    class PerToken(nn.Module):
        def flops_per_token(self) -> float:
            return 6.0

    class Windows:
        tokens_per_sample = 100

    assert flops_per_sample(PerSample(), Windows()) == 600.0
    assert flops_per_sample(PerToken(), Windows()) == 600.0
    assert flops_per_sample(PerToken(), object()) == 0.0  # no tokens: no MFU column
    assert flops_per_sample(nn.Linear(2, 2), Windows()) == 0.0


def test_the_compiling_steps_window_gives_no_eta(tmp_path: Path) -> None:
    import io

    from jeanzay_kit.runtime.metrics import MetricsWriter, read_records

    out = io.StringIO()
    writer = MetricsWriter(RunDir(tmp_path), True, 100, stream=out)
    first = {"step": 1, "loss": 1.0, "step_time_s": 40.0, "compile_s": 40.0}
    writer.log(first, eta=False)
    writer.log({"step": 2, "loss": 0.9, "step_time_s": 0.5})
    writer.close()
    lines = out.getvalue().splitlines()
    assert "ETA from the next step" in lines[0] and "ETA 49s" in lines[1], lines
    records = read_records(tmp_path / "metrics.jsonl")
    assert records[0]["eta_s"] is None and records[0]["compile_s"] == 40.0
    assert records[1]["eta_s"] == pytest.approx(49.0)
