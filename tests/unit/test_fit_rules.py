"""config/fit_rules.py: one GPU's peak for each parallel mode, from traced bytes."""

from __future__ import annotations

import pytest

from jeanzay_kit.config import fit_rules as rules
from jeanzay_kit.config.clusters import _gpu_memory

GB = 2**30
BACK = rules.Usage(params=4 * GB, grads=4 * GB, optimizer=8 * GB, activations=3 * GB, temporary=GB)
STEP = rules.Usage(params=4 * GB, grads=4 * GB, optimizer=8 * GB, temporary=GB)
TRACED = rules.Traced(
    backward=BACK,
    step=STEP,
    forward_activations=2 * GB,
    param_bytes=4 * GB,
    grad_bytes=4 * GB,
    root_bytes=GB // 2,
    block_bytes=GB // 4,
    output_bytes=GB // 8,
)


@pytest.mark.parametrize(
    ("plan", "total", "buffers"),
    [
        (rules.Plan("ddp", dp_size=1), 20 * GB, 0),  # one replica: no bucket
        (rules.Plan("ddp", dp_size=8), 24 * GB, 4 * GB),  # + one flat copy of the grads
        (rules.Plan("fsdp", dp_size=4), 8 * GB + GB // 2 + 3 * GB // 4, GB // 2 + 3 * GB // 4),
        (rules.Plan("dataparallel", 1, gpus_per_node=4), 20 * GB + 3 * GB // 8, 3 * GB // 8),
    ],
)  # fmt: skip
def test_replicated_modes_add_or_divide_what_they_should(
    plan: rules.Plan, total: int, buffers: int
) -> None:
    est = rules.replicated(plan, TRACED)
    assert (est.total, est.buffers) == (total, buffers)


def test_fsdp_peaks_at_the_step_when_sharding_leaves_the_step_largest() -> None:
    big_step = rules.Traced(
        backward=rules.Usage(params=GB), step=rules.Usage(params=GB, optimizer=40 * GB),
        forward_activations=0, param_bytes=GB, grad_bytes=GB,
    )  # fmt: skip
    est = rules.replicated(rules.Plan("fsdp", dp_size=2), big_step)
    assert est.where == "optimizer step" and est.model_states == 41 * GB // 2


@pytest.mark.parametrize(
    ("schedule", "held"), [("gpipe", [8, 8]), ("1f1b", [3, 2])]
)  # stage 0 of 2 in torch's 1F1B holds 3 micro-batches, the last one 2; GPipe all 8
def test_a_pipeline_stage_holds_its_micro_batches_in_flight(schedule: str, held: list[int]) -> None:
    plan = rules.Plan("pipeline", dp_size=1, pp_size=2, microbatches=8, schedule=schedule)
    assert [rules.in_flight(plan, s) for s in range(2)] == held
    est = rules.pipeline(plan, [TRACED, TRACED])
    assert est.total == BACK.total + (held[0] - 1) * 2 * GB


def test_the_limit_keeps_headroom_and_the_line_says_estimate_limit_and_hint() -> None:
    assert rules.usable_bytes(32 * 1024) == int(32 * GB * rules.HEADROOM)
    est = rules.replicated(rules.Plan("ddp", dp_size=8), TRACED)
    hint = (("parallel=fsdp", "resources.nodes=2"), rules.Estimate(GB, GB, GB))
    line = rules.refusal("ddp", est, 16 * 1024, "v100-16g", hint)
    assert "\n" not in line
    assert "24.0 GiB per GPU" in line and "16 GiB GPU (v100-16g)" in line and "14.4 GiB" in line
    assert line.endswith("HINT: parallel=fsdp resources.nodes=2 (3.0 GiB per GPU)")
    assert "HINT:" in rules.refusal("ddp", est, 16 * 1024, "", None)


def test_hints_keep_data_parallelism_first_then_shard_then_grow() -> None:
    knobs = rules.Knobs(
        mode="ddp", micro_batch_size=8, smaller_micro_batches=(4, 2), nodes=1,
        activation_checkpointing=False, per_replica=8, larger_constraints=("v100-32g",),
    )  # fmt: skip
    found = rules.candidates(knobs)
    assert found[:3] == [
        ("train.micro_batch_size=4",),
        ("train.micro_batch_size=2",),
        ("train.activation_checkpointing=true",),
    ]
    first_fsdp = next(i for i, c in enumerate(found) if "parallel=fsdp" in c)
    assert all("parallel=fsdp" not in c for c in found[:first_fsdp])
    assert ("parallel=fsdp", "resources.constraint=v100-32g") in found
    assert ("parallel=fsdp", "resources.nodes=2", "train.micro_batch_size=4") in found
    assert len(found) == len(set(found))


def test_a_profile_gives_gpu_memory_per_constraint_and_the_smallest_without_one() -> None:
    from jeanzay_kit.config.clusters import Partition

    sizes = _gpu_memory("cluster.partitions.p.gpu_memory", {"v100-16g": "16G", "v100-32g": "32G"})
    part = Partition("p", 4, 40, None, gpu_memory_mb=sizes)
    assert part.gpu_memory_for("v100-32g") == (32 * 1024, "v100-32g")
    assert part.gpu_memory_for(None) == (16 * 1024, "v100-16g")
    assert Partition("q", 4, 40, None).gpu_memory_for(None) is None
    assert _gpu_memory("k", "80G") == {"": 80 * 1024}


@pytest.mark.parametrize(
    ("change", "mode", "dp"),
    [
        (("train.micro_batch_size=4",), "ddp", 4),
        (("parallel=fsdp",), "fsdp", 4),
        (("parallel=fsdp", "resources.nodes=2", "train.micro_batch_size=4"), "fsdp", 8),
    ],
)
def test_a_change_is_judged_by_its_model_states_before_it_is_composed(
    change: tuple[str, ...], mode: str, dp: int
) -> None:
    plan = rules.changed_plan(rules.Plan("ddp", 4, gpus_per_node=4), 1, change)
    assert (plan.mode, plan.dp_size) == (mode, dp)
    # The optimizer step: 16 GB of states (sharded under fsdp), 1 GB of temporaries, and
    # DDP's 4 GB of buckets.
    floor = 16 * GB // dp + GB if mode == "fsdp" else 16 * GB + GB + 4 * GB
    assert rules.states_floor(plan, TRACED) == floor


@pytest.mark.parametrize(
    ("limit", "start", "chosen"),
    [(20, 4, 16), (20, 6, 16), (3, 5, 2), (0, 3, 0), (1000, 6, 64), (20, 0, 16)],
)  # options of 64 per replica: 1 2 4 8 16 32 64; start is an index into them
def test_the_auto_search_from_the_estimate_finds_the_same_size(
    limit: int, start: int, chosen: int
) -> None:
    from jeanzay_kit.config.micro_batch_rules import candidates, largest_fitting

    options, tried = candidates(64), []

    def fits(m: int) -> bool:
        tried.append(m)
        return m <= limit

    assert largest_fitting(options, fits, start)[0] == chosen
    assert len(tried) == len(set(tried)), tried
