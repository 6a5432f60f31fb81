"""Checkpoint layout rules (pure) and the on-disk store, on plain files."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from jeanzay_kit.ckpt.checksum import algorithm_of, checksum_of
from jeanzay_kit.ckpt.layout import (
    Entry,
    FileRecord,
    Manifest,
    compare_files,
    parse_manifest,
    parse_step_dir,
    shape_changes,
    to_delete,
    world_change,
)
from jeanzay_kit.ckpt.store import CheckpointStore, check_resume_early
from jeanzay_kit.config.identity import config_differences, config_hash, resume_hash
from jeanzay_kit.errors import ResumeError
from jeanzay_kit.rundir.run_directory import RunDir


@pytest.mark.parametrize(
    ("name", "step"),
    [("step-0", 0), ("step-120", 120), ("step-x", None), (".tmp-step-3", None), ("step-1a", None)],
)
def test_parse_step_dir(name: str, step: int | None) -> None:
    assert parse_step_dir(name) == step


def entries(*spec: tuple[int, bool]) -> list[Entry]:
    return [Entry(s, f"step-{s}", complete) for s, complete in spec]


def test_retention_keeps_the_newest_k() -> None:
    es = entries((10, True), (20, True), (30, True), (40, True))
    assert [e.step for e in to_delete(es, 2, [10, 20, 30, 40])] == [20, 10]


def test_retention_never_deletes_the_newest_good_even_with_keep_zero() -> None:
    es = entries((10, True), (20, True))
    assert [e.step for e in to_delete(es, 0, [10, 20])] == [10]


def test_retention_keeps_the_newest_good_when_newer_ones_are_damaged() -> None:
    # step-30 has a manifest but failed verification: 20 is the newest good one.
    es = entries((10, True), (20, True), (30, True))
    removed = [e.step for e in to_delete(es, 1, [10, 20])]
    assert 20 not in removed and 30 not in removed
    assert removed == [10]


def test_retention_ignores_incomplete_folders() -> None:
    es = entries((10, True), (20, False), (30, True))
    assert [e.step for e in to_delete(es, 1, [10, 30])] == [10]


def manifest() -> Manifest:
    return Manifest(
        step=5,
        files={"a": FileRecord(3, "xxh3_128:" + "x" * 32), "b/c": FileRecord(4, "sha256:y")},
        world={"mode": "ddp"},
        config_hash="h",
        code_version="0",
        sample_position=80,
    )


def test_manifest_round_trips() -> None:
    assert parse_manifest(manifest().to_json()) == manifest()


@pytest.mark.parametrize("text", ["", "{", '{"format": 99}', '{"format": 1, "step": 1}'])
def test_bad_manifests_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_manifest(text)


@pytest.mark.parametrize(
    ("found", "problem"),
    [
        ({"a": FileRecord(3, "xxh3_128:" + "x" * 32)}, "b/c: missing"),
        ({"a": FileRecord(3, "xxh3_128:" + "x" * 32), "b/c": FileRecord(2, "sha256:y")}, "trunc"),
        ({"a": FileRecord(3, "xxh3_128:" + "z" * 32), "b/c": FileRecord(4, "sha256:y")}, "a: che"),
    ],
)
def test_compare_files_names_each_problem(found, problem: str) -> None:
    problems = compare_files(manifest(), found)
    assert len(problems) == 1 and problem in problems[0]


def test_a_format_1_manifest_reads_as_sha256_checksums() -> None:
    text = '{"format": 1, "step": 5, "files": {"a": {"size": 3, "sha256": "ab"}}, "world": {}}'
    assert parse_manifest(text).files == {"a": FileRecord(3, "sha256:ab")}


@pytest.mark.parametrize(
    ("data", "algorithm", "expected"),
    [
        # Reference values: `python -c "import hashlib; print(hashlib.sha256(b'abc')...)"`
        # and the xxhash package's own xxh3_128 of b"abc".
        (
            b"abc",
            "sha256",
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
        ),
        (b"abc", "xxh3_128", "xxh3_128:06b05ab6733a618578af5f94892f3950"),
    ],
)
def test_checksums_name_their_algorithm(data: bytes, algorithm: str, expected: str) -> None:
    assert checksum_of(data, algorithm) == expected
    assert algorithm_of(expected) == algorithm


def test_a_checksum_naming_no_algorithm_is_refused_not_guessed() -> None:
    assert algorithm_of("ba7816bf") == ""
    with pytest.raises(ValueError, match="unknown checksum algorithm ''"):
        checksum_of(b"abc", algorithm_of("ba7816bf"))


def test_config_hash_ignores_what_does_not_change_the_computation() -> None:
    a = {"train": {"steps": 10, "seed": 0}, "job": {"name": "x"}}
    b = {"train": {"steps": 99, "seed": 0}, "job": {"name": "y"}}
    c = {"train": {"steps": 10, "seed": 1}, "job": {"name": "x"}}
    ignore = ("train.steps", "job")
    assert config_hash(a, ignore) == config_hash(b, ignore)
    assert config_hash(a, ignore) != config_hash(c, ignore)
    assert config_differences(a, c, ignore) == ["train.seed: 0 -> 1"]


def world(mode: str = "ddp", size: int = 4, pp: int = 1, spr: int = 1) -> dict:
    return {
        "mode": mode,
        "world_size": size,
        "pp_size": pp,
        "dp_size": size // pp,
        "stages_per_rank": spr,
    }


@pytest.mark.parametrize(
    ("saved", "now", "refused_key"),
    [
        (world(size=4), world(size=2), None),
        (world(size=4), world(size=8), None),
        (world("fsdp", 4), world("fsdp", 2), None),
        (world("pipeline_ddp", 4, pp=2), world("pipeline_ddp", 2, pp=2), None),
        (
            world("pipeline_ddp", 4, pp=2),
            world("pipeline_ddp", 4, pp=4),
            "parallel.pipeline_stages",
        ),
        (
            world("pipeline", 2, pp=2, spr=2),
            world("pipeline", 2, pp=2, spr=1),
            "parallel.stages_per_rank",
        ),
        (world("ddp", 4), world("fsdp", 4), "parallel.mode"),
        ({}, world(), "parallel.mode"),
    ],
)
def test_a_checkpoint_follows_the_data_parallel_size_not_the_model_split(
    saved: dict, now: dict, refused_key: str | None
) -> None:
    refusal, note = world_change("ck/step-5", saved, now)
    if refused_key is None:
        assert refusal is None
        assert (note is None) == (saved == now)
        if note:
            assert f"on {saved['world_size']} rank(s)" in note and "accumulation adapts" in note
    else:
        assert refusal is not None and refused_key in refusal and note is None
        assert "ck/step-5" in refusal and "HINT" in refusal


def test_resources_do_not_change_the_config_hash_the_split_does() -> None:
    base = {"resources": {"nodes": 1, "gpus_per_node": 4}, "parallel": {"pipeline_stages": 1}}
    more = {"resources": {"nodes": 2, "gpus_per_node": 8}, "parallel": {"pipeline_stages": 1}}
    split = {"resources": {"nodes": 1, "gpus_per_node": 4}, "parallel": {"pipeline_stages": 2}}
    assert resume_hash(base) == resume_hash(more) != resume_hash(split)


def test_a_split_change_is_refused_before_any_worker_even_with_allow_change(
    tmp_path: Path,
) -> None:
    store = CheckpointStore(tmp_path / "checkpoints")
    config = {"parallel": {"pipeline_stages": 2}}
    fake_save(store, 10, world=world("pipeline_ddp", 4, pp=2), config=config)
    # Fewer data-parallel ranks: fine.
    check_resume_early(RunDir(tmp_path), config, world("pipeline_ddp", 2, pp=2), "auto", False)
    with pytest.raises(ResumeError, match="parallel.pipeline_stages: 2 -> 4"):
        check_resume_early(RunDir(tmp_path), config, world("pipeline_ddp", 4, pp=4), "auto", True)


@pytest.mark.parametrize(
    ("change", "refused"),
    [
        ({"hidden": 64}, ["model.hidden: 128 -> 64"]),
        ({"depth": 6}, ["model.depth: 4 -> 6"]),
        (
            {"_target_": "my.Model"},
            ["model._target_: 'jeanzay_kit.examples.models.MLP' -> 'my.Model'"],
        ),
        ({"dropout": 0.1}, []),
        ({"activation_checkpointing": True}, []),
    ],
)
def test_a_model_shape_change_is_named_dropout_is_not(change: dict, refused: list) -> None:
    old = {
        "model": {
            "_target_": "jeanzay_kit.examples.models.MLP",
            "hidden": 128,
            "depth": 4,
            "dropout": 0.0,
            "activation_checkpointing": False,
        }
    }
    new = {"model": {**old["model"], **change}}
    assert shape_changes(old, new) == refused


def test_allow_config_change_still_refuses_another_model_shape(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "checkpoints")
    config = {"model": {"hidden": 128, "dropout": 0.0}, "optim": {"lr": 0.1}}
    fake_save(store, 10, world=world(), config=config)
    lr = {**config, "optim": {"lr": 0.2}}
    with pytest.raises(ResumeError, match="optim.lr"):
        check_resume_early(RunDir(tmp_path), lr, world(), "auto", False)
    check_resume_early(RunDir(tmp_path), lr, world(), "auto", True)
    check_resume_early(
        RunDir(tmp_path),
        {**config, "model": {"hidden": 128, "dropout": 0.1}},
        world(),
        "auto",
        True,
    )
    wider = {**config, "model": {"hidden": 256, "dropout": 0.0}}
    with pytest.raises(ResumeError, match=r"model.hidden: 128 -> 256.*even with"):
        check_resume_early(RunDir(tmp_path), wider, world(), "auto", True)


# ---- the store on disk ----------------------------------------------------------------


def fake_save(
    store: CheckpointStore,
    step: int,
    payload: bytes = b"weights",
    world: dict | None = None,
    config: dict | None = None,
) -> None:
    tmp = store.tmp_dir(step)
    (tmp / "dcp").mkdir(parents=True)
    (tmp / "dcp" / "__0_0.distcp").write_bytes(payload)
    (tmp / "trainer.pt").write_bytes(b"trainer")
    if config is not None:
        (tmp / "config.json").write_text(json.dumps(config))
    store.commit(
        step,
        {
            "world": world or {},
            "config_hash": resume_hash(config) if config else "h",
            "code_version": "0",
            "sample_position": step,
        },
    )


def test_commit_seals_a_folder_with_its_manifest_last(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    fake_save(store, 10)
    assert not store.tmp_dir(10).exists()
    assert store.problems(10) == []
    m = store.manifest(10)
    assert set(m.files) == {"dcp/__0_0.distcp", "trainer.pt"} and m.sample_position == 10


@pytest.mark.parametrize("damage", ["flip", "truncate", "delete", "manifest"])
def test_newest_good_skips_damaged_checkpoints(tmp_path: Path, damage: str) -> None:
    store = CheckpointStore(tmp_path)
    fake_save(store, 10)
    fake_save(store, 20)
    target = store.step_dir(20) / "dcp" / "__0_0.distcp"
    if damage == "flip":
        target.write_bytes(b"weighTs")
    elif damage == "truncate":
        target.write_bytes(b"wei")
    elif damage == "delete":
        target.unlink()
    else:
        (store.step_dir(20) / "manifest.json").write_text("{ half a manifest")
    reports: list[str] = []
    assert store.newest_good(report=reports.append) == 10
    assert len(reports) == 1 and "step-20" in reports[0]


def test_new_checkpoints_use_xxh3_and_sha256_ones_still_verify(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    fake_save(store, 10)
    records = store.manifest(10).files
    assert all(r.checksum.startswith("xxh3_128:") for r in records.values())
    # The same checkpoint as an older version wrote it: format 1, sha256.
    manifest = store.step_dir(10) / "manifest.json"
    data = json.loads(manifest.read_text())
    data["format"] = 1
    for name, rec in data["files"].items():
        payload = (store.step_dir(10) / name).read_bytes()
        rec.pop("checksum")
        rec["sha256"] = hashlib.sha256(payload).hexdigest()
    manifest.write_text(json.dumps(data))
    assert store.problems(10) == []
    (store.step_dir(10) / "trainer.pt").write_bytes(b"trainEr")  # same size, one bit
    assert store.problems(10) == ["trainer.pt: checksum differs from the manifest (corrupted)"]


def test_an_unknown_checksum_algorithm_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    fake_save(store, 10)
    manifest = store.step_dir(10) / "manifest.json"
    manifest.write_text(manifest.read_text().replace('"xxh3_128:', '"blake9:'))
    problems = store.problems(10)
    assert len(problems) == 1 and "unknown checksum algorithm 'blake9'" in problems[0]


def test_unsealed_and_temporary_folders_are_never_chosen_and_are_cleaned(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    fake_save(store, 10)
    store.tmp_dir(30).mkdir()  # a save killed while writing
    (store.step_dir(40)).mkdir()  # renamed but killed before the manifest
    assert store.newest_good() == 10
    assert sorted(store.remove_stale()) == [".tmp-step-30", "step-40"]
    assert [e.name for e in store.entries()] == ["step-10"]


def test_retention_on_disk(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    for step in (10, 20, 30, 40):
        fake_save(store, step)
        store.apply_retention(2, newest_good=step)
    assert [e.step for e in store.entries()] == [40, 30]


def test_retention_renames_to_trash_first_and_trash_never_counts(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    for step in (10, 20, 30):
        fake_save(store, step)
    assert store.apply_retention(1, newest_good=30, delete=False) == ["step-20", "step-10"]
    # Dropped checkpoints stop counting at once, before their files are deleted.
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".trash-step-10",
        ".trash-step-20",
        "step-30",
    ]
    assert [e.step for e in store.entries()] == [30]
    assert store.newest_good() == 30
    # A crash before the deletion leaves trash that the next start cleans.
    assert sorted(store.remove_stale()) == [".trash-step-10", ".trash-step-20"]
    fake_save(store, 40)
    store.apply_retention(1, newest_good=40, delete=False)
    store.empty_trash()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-40"]


@pytest.mark.parametrize(
    ("saved", "current", "says"),
    [
        ({"w": (8, 1, 3, 3)}, {"w": (8, 1, 3, 3)}, None),
        # The saved side may hold more than the model (only model keys are passed, but
        # a removed layer is still named).
        (
            {"conv.weight": (8, 1, 3, 3), "fc.weight": (10, 8)},
            {"conv.weight": (16, 1, 3, 3), "fc.weight": (10, 16)},
            "conv.weight is [16, 1, 3, 3] in the model, [8, 1, 3, 3] in the checkpoint",
        ),
        ({"a": (2,)}, {"a": (2,), "b": (3,)}, "the model has b [3], which the checkpoint lacks"),
        ({"a": (2,), "old": (4,)}, {"a": (2,)}, "the checkpoint has old [4], which the model"),
    ],
)
def test_a_model_that_no_longer_fits_its_checkpoint_is_named(saved, current, says) -> None:
    from jeanzay_kit.ckpt.layout import parameter_mismatch

    message = parameter_mismatch("run/checkpoints/step-10", saved, current)
    if says is None:
        assert message is None
        return
    assert message.startswith("cannot resume from run/checkpoints/step-10: the model no longer")
    assert says in message
    assert "HINT: start a fresh run with another job.name" in message
    assert "resume=never" in message


def test_a_pipeline_stage_is_compared_on_its_own_part() -> None:
    from jeanzay_kit.ckpt.layout import parameter_mismatch

    saved = {"blocks.0.w": (4, 4), "blocks.1.w": (4, 4)}
    # Stage 1 of 2 holds blocks.1 only: the other stage's entries are no change.
    assert parameter_mismatch("f", saved, {"blocks.1.w": (4, 4)}, whole_model=False) is None
    assert parameter_mismatch("f", saved, {"blocks.1.w": (4, 4)}) is not None
    changed = parameter_mismatch("f", saved, {"blocks.1.w": (8, 4)}, whole_model=False)
    assert changed is not None and "blocks.1.w is [8, 4] in the model, [4, 4]" in changed
