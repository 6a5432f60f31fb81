"""Fit before the queue (launch/fit_check.py): a plan above its GPU's memory is refused in
one line whose hint, applied, passes; the estimate follows what a real step allocates."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import torch
from torch.distributed._tools.mem_tracker import MemTracker

from jeanzay_kit.config import fit_rules as rules
from jeanzay_kit.errors import JzkError
from jeanzay_kit.launch import fit_check
from jeanzay_kit.launch.request import spec_of

V100 = ["cluster=jeanzay_v100", "cluster.account=abc@v100"]
# The issue's request: a 6.4 B-parameter GPT in DDP on 4 V100s.
ISSUE = [
    *V100, "model=gpt", "data=stdlib_text", "model.n_layer=32", "model.n_embd=4096",
    "model.n_head=32", "parallel=ddp", "resources.gpus_per_node=4", "train.global_batch_size=32",
]  # fmt: skip


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(fit_check.ENV_SWITCH, raising=False)
    return dict(os.environ)


def _check(overrides: list[str], env: dict[str, str]) -> fit_check.Fit | None:
    spec = spec_of(overrides, None, fit=False)
    return fit_check.check(spec, overrides, lambda more: spec_of(more, None, fit=False), env)


def _hint(line: str) -> list[str]:
    found = re.search(r"HINT: (.*) \([0-9.]+ [GM]iB per GPU\)$", line)
    assert found, line
    return found.group(1).split()


def test_the_issues_plan_is_refused_and_its_hint_applied_passes(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(JzkError) as refused:
        _check(ISSUE, env)
    line = str(refused.value)
    assert "\n" not in line and "parallel.mode=ddp needs" in line and "14.4 GiB" in line
    hint = _hint(line)
    spec_of([*ISSUE, *hint], None)  # the whole check, as every command runs it: passes
    fit = _check([*ISSUE, *hint], env)
    assert fit is not None and fit.estimate.total <= rules.usable_bytes(fit.gpu_mb)

    def no_trace(spec: object) -> list[rules.Traced]:
        raise AssertionError("traced again: the cache was not used")

    monkeypatch.setattr(fit_check, "trace_spec", no_trace)
    with pytest.raises(JzkError, match=re.escape(line)):
        spec_of(ISSUE, None)  # the same plan again: answered from the cache


def test_a_small_model_fits_and_is_said_with_its_split(env: dict[str, str]) -> None:
    fit = _check([*V100, "model=gpt", "data=stdlib_text", "parallel=fsdp"], env)
    assert fit is not None
    assert fit.line().startswith("gpu memory") and "model states" in fit.line()
    assert "(v100-16g)" in fit.line()


def test_no_check_without_the_gpus_memory_or_when_switched_off(env: dict[str, str]) -> None:
    assert _check(["cluster=slurm_local", *ISSUE[2:]], env) is None  # no gpu_memory
    assert _check(ISSUE, {**env, fit_check.ENV_SWITCH: "0"}) is None


# A real CPU step of the shipped models, its allocations counted by MemTracker on real
# tensors, against the estimate traced on fake ones (the issue's point 4: within 15 %).
ACCURACY = [
    ["model=gpt", "data=stdlib_text", "model.n_layer=2", "model.n_embd=128"],
    ["model=gpt", "data=stdlib_text", "model.n_layer=2", "model.n_embd=128",
     "train.activation_checkpointing=true", "train.precision=fp32"],
    ["model=mlp", "data=synthetic", "model.hidden=512"],
]  # fmt: skip


def _real_peak(overrides: list[str]) -> int:
    from jeanzay_kit.train.components import build_dataset, build_loss, build_model, build_optimizer
    from jeanzay_kit.train.micro_batch import first_samples

    spec = spec_of(overrides, None, fit=False)
    torch.manual_seed(0)
    model = build_model(spec, warn=False)
    batch = first_samples(spec, build_dataset(spec), spec.train.micro_batch_size)
    loss = build_loss(spec, model)
    opt = build_optimizer(model.parameters(), spec.optim, torch.device("cuda"))
    low = spec.train.precision in ("bf16", "fp16")
    tracker = MemTracker()
    tracker.track_external(model, opt)
    with tracker:
        for _ in range(2):  # the loop's steps: grad_accum_steps micro-batches each
            for _ in range(spec.train.grad_accum_steps):
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=low):
                    value = loss(model, batch)
                (value / spec.train.grad_accum_steps).backward()
                del value
                tracker.reset_mod_stats()
            opt.step()
            opt.zero_grad(set_to_none=True)
            tracker.reset_mod_stats()
    return sum(snap["Total"] for snap in tracker.get_tracker_snapshot("peak").values())


@pytest.mark.parametrize("model", ACCURACY, ids=lambda o: " ".join(o[:1] + o[3:]))
def test_the_estimate_is_within_15_percent_of_a_real_step(
    model: list[str], env: dict[str, str]
) -> None:
    overrides = [*V100, *model, "parallel=ddp", "resources.gpus_per_node=1"]
    fit = _check(overrides, env)
    assert fit is not None
    real = _real_peak(overrides)
    assert abs(fit.estimate.total - real) <= 0.15 * real, (fit.estimate, real)


def test_auto_micro_batch_starts_where_the_estimate_says_it_fits() -> None:
    from jeanzay_kit.train.micro_batch import auto_start, estimate_at

    auto = [*V100, "model=gpt", "data=stdlib_text", "train.micro_batch_size=auto"]
    spec = spec_of([*auto, "train.global_batch_size=64", "resources.gpus_per_node=1"], None)
    options = [1, 2, 4, 8, 16, 32, 64]
    top, words = auto_start(spec, options, 2**40)
    assert top == len(options) - 1 and "started at 64" in words
    assert auto_start(spec, options, 1)[0] == 0
    # A GPU whose usable memory the line through 1 and 2 samples reaches at 13: start at 8.
    p1, p2 = (estimate_at(spec, m) for m in (1, 2))
    capacity = int((p1 + (p2 - p1) * 12) / rules.HEADROOM)
    assert options[auto_start(spec, options, capacity)[0]] == 8


def test_render_refuses_a_plan_that_does_not_fit_before_writing_anything(
    env: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from jeanzay_kit.cli import main

    big = [*ISSUE[:4], "model.n_layer=16", "model.n_embd=2048", "model.n_head=16", *ISSUE[7:]]
    out = tmp_path / "jobs"
    assert main(["render", "-o", str(out), "job.workdir=" + str(tmp_path), *big]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "parallel.mode=ddp needs" in err and "HINT:" in err
    assert not out.exists() and not (tmp_path / "logs").exists()
    hint = _hint(err.removeprefix("jzk render: error: "))
    assert main(["render", "-o", str(out), "job.workdir=" + str(tmp_path), *big, *hint]) == 0


def test_an_edited_model_is_traced_again(env: dict[str, str], tmp_path: Path) -> None:
    """The cache follows the code of the model's _target_, not only the config."""
    (tmp_path / "mynet.py").write_text(
        "import torch\n\nclass Net(torch.nn.Linear):\n"
        "    def __init__(self):\n        super().__init__(32, 8)\n"
    )
    import sys

    sys.path.insert(0, str(tmp_path))
    try:
        args = [*V100, "model=custom", "model._target_=mynet.Net", "parallel=ddp"]
        spec = spec_of(args, None, fit=False)
        before = fit_check.trace_key(spec)
        assert before == fit_check.trace_key(spec)
        (tmp_path / "mynet.py").write_text((tmp_path / "mynet.py").read_text() + "# edited\n")
        assert fit_check.trace_key(spec) != before
    finally:
        sys.path.remove(str(tmp_path))


def test_a_sweep_of_train_py_states_each_points_figure_and_refuses_one_that_cannot_fit(
    env: dict[str, str], tmp_path: Path
) -> None:
    """`python train.py -m` (the jeanzay launcher): every point is estimated as `jzk
    validate` estimates it; one that cannot fit refuses the sweep before anything is
    submitted, naming the point and its hint."""
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    sweep = [*ISSUE[:4], "model.n_layer=16", "model.n_embd=2048,128", "model.n_head=16"]
    done = subprocess.run(
        [sys.executable, str(repo / "train.py"), "-m", *sweep, *ISSUE[7:],
         f"hydra.sweep.dir={tmp_path / 'sweep'}"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 2, out[-3000:]
    assert "nothing was submitted" in out
    (refused,) = [line for line in out.splitlines() if "parallel.mode=ddp needs" in line]
    assert refused.startswith("#0 (") and "model.n_embd=2048" in refused and "HINT:" in refused
    # The point that fits is said with its figure (what the launcher logs of each point).
    assert re.search(r"#1 \(.*model.n_embd=128.*\): gpu memory .* per GPU", out), out[-3000:]
    assert not (tmp_path / "sweep" / "manifest.jsonl").exists()


def test_a_sweep_of_learning_rates_shares_one_trace() -> None:
    """optim's values that change no memory are not in the trace's key (a 1,000-point
    lr sweep traced once, not 1,000 times); the optimizer and its momentum are."""
    from jeanzay_kit.launch.fit_check import trace_key
    from jeanzay_kit.launch.request import spec_of

    def key(*more: str) -> str:
        return trace_key(spec_of(["cluster=jeanzay_h100", "cluster.account=abc@h100", *more], None))

    assert key("optim.lr=0.1", "optim.warmup_steps=5") == key("optim.lr=0.2")
    assert key("optim=sgd") != key()
    assert key("optim=sgd", "optim.momentum=0.0") != key("optim=sgd")
