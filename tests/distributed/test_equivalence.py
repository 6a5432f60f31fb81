"""Every parallel mode trains the same model as one process on the same global batch.

CPU, gloo, 2 and 4 processes started by `python train.py` itself. After a few AdamW steps
the parameters must match the single-process run to float32 rounding: the modes differ
only in where the arithmetic happens, never in what is computed.
"""

from __future__ import annotations

import json

import pytest
import torch

# 4 steps of global batch 32 (micro 8): 1 process accumulates 4 micro-batches per step,
# 2 data-parallel ranks accumulate 2, 4 ranks accumulate 1.
COMMON = (
    "train.steps=4",
    "train.log_every=1",
    "train.eval_every=0",
    "train.global_batch_size=32",
    "train.micro_batch_size=8",
)

CASES = [
    pytest.param(("parallel=ddp", "resources.gpus_per_node=2"), id="ddp-2"),
    pytest.param(("parallel=ddp", "resources.gpus_per_node=4"), id="ddp-4"),
    pytest.param(("parallel=fsdp", "resources.gpus_per_node=2"), id="fsdp-2"),
    pytest.param(("parallel=fsdp", "resources.gpus_per_node=4"), id="fsdp-4"),
    pytest.param(
        ("parallel=pipeline", "resources.gpus_per_node=2", "parallel.schedule=gpipe"),
        id="pipeline-2-gpipe",
    ),
    pytest.param(
        ("parallel=pipeline", "resources.gpus_per_node=2", "parallel.schedule=1f1b"),
        id="pipeline-2-1f1b",
    ),
    pytest.param(
        (
            "parallel=pipeline",
            "resources.gpus_per_node=4",
            "parallel.pipeline_stages=4",
            "parallel.schedule=1f1b",
        ),
        id="pipeline-4-1f1b",
    ),
    pytest.param(
        (
            "parallel=pipeline",
            "resources.gpus_per_node=2",
            "parallel.schedule=interleaved_1f1b",
            "parallel.stages_per_rank=2",
        ),
        id="pipeline-2-interleaved",
    ),
    pytest.param(
        ("parallel=pipeline_ddp", "resources.gpus_per_node=4", "parallel.pipeline_stages=2"),
        id="pipeline_ddp-2x2",
    ),
    pytest.param(("parallel=dataparallel", "resources.gpus_per_node=1"), id="dataparallel"),
]


def assert_same_model(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert sorted(got) == sorted(want)
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=1e-5, atol=1e-6, msg=name)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The single-process run everything is compared with (computed once per module)."""
    import subprocess
    import sys

    from tests.distributed.conftest import REPO

    out = {}
    for model in ("mlp", "gpt"):
        run_dir = tmp_path_factory.mktemp(f"ref-{model}")
        extra = ("model=gpt", "data=stdlib_text", "data.max_bytes=200000") if model == "gpt" else ()
        subprocess.run(
            [
                sys.executable,
                "train.py",
                *COMMON,
                *extra,
                "resources.gpus_per_node=1",
                f"hydra.run.dir={run_dir}",
            ],
            cwd=REPO,
            check=True,
            capture_output=True,
            timeout=240,
        )
        out[model] = torch.load(run_dir / "model_final.pt", weights_only=True)
    return out


@pytest.mark.timeout(300)
@pytest.mark.parametrize("overrides", CASES)
def test_mode_matches_single_process(train_run, reference, overrides) -> None:
    run = train_run("run", *COMMON, *overrides)
    assert_same_model(run.state, reference["mlp"])


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "overrides",
    [
        ("parallel=ddp", "resources.gpus_per_node=2"),
        ("parallel=pipeline", "resources.gpus_per_node=2", "parallel.microbatches=2"),
    ],
    ids=["gpt-ddp-2", "gpt-pipeline-2"],
)
def test_gpt_matches_single_process(train_run, reference, overrides) -> None:
    run = train_run(
        "gpt", *COMMON, "model=gpt", "data=stdlib_text", "data.max_bytes=200000", *overrides
    )
    assert_same_model(run.state, reference["gpt"])


@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode", ["ddp", "pipeline_ddp"])
def test_same_seed_is_bitwise_identical_run_to_run(train_run, mode) -> None:
    extra = ("parallel.pipeline_stages=2",) if mode == "pipeline_ddp" else ()
    a = train_run("a", *COMMON, f"parallel={mode}", "resources.gpus_per_node=4", *extra)
    b = train_run("b", *COMMON, f"parallel={mode}", "resources.gpus_per_node=4", *extra)
    assert a.digest == b.digest
    for name, tensor in a.state.items():
        assert torch.equal(tensor, b.state[name]), name


@pytest.mark.timeout(300)
def test_another_seed_gives_another_model(train_run) -> None:
    a = train_run("a", *COMMON, "resources.gpus_per_node=2", "train.seed=0")
    b = train_run("b", *COMMON, "resources.gpus_per_node=2", "train.seed=1")
    assert a.digest != b.digest


@pytest.mark.timeout(300)
def test_activation_checkpointing_changes_memory_not_results(train_run, reference) -> None:
    run = train_run(
        "ac", *COMMON, "resources.gpus_per_node=2", "train.activation_checkpointing=true"
    )
    assert_same_model(run.state, reference["mlp"])


@pytest.mark.timeout(300)
def test_bf16_autocast_trains(train_run) -> None:
    run = train_run(
        "bf16",
        "resources.gpus_per_node=2",
        "train.precision=bf16",
        "train.steps=60",
        "train.log_every=10",
        "train.eval_every=0",
    )
    losses = [
        json.loads(line)["loss"]
        for line in (run.run_dir / "metrics.jsonl").read_text().splitlines()
    ]
    assert len(losses) == 6
    assert losses[-1] < 0.5 * losses[0]
