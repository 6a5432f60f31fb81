"""The storage rules as values (issue 71): a profile's tiers, which tier a path is on, what
a request writes where and whether it fits, and when a scratch checkpoint is at risk."""

from __future__ import annotations

import pytest

from jeanzay_kit.config.storage_rules import (
    StorageTier,
    purge_note,
    size_bytes,
    storage_tiers,
    tier_of,
)
from jeanzay_kit.errors import SpecError
from jeanzay_kit.launch.storage_rules import (
    QuotaLeft,
    Request,
    Room,
    quota_left,
    shortfalls,
    writes,
)

TIERS = storage_tiers(
    {
        "scratch": {"path": "$SCRATCH", "purge_days": 30},
        "work": {"path": "$WORK", "files": 500000, "bytes": "5T"},
        "inner": {"path": "$WORK/fast"},
    }
)
EXPANDED = {"scratch": "/s", "work": "/w", "inner": "/w/fast"}


@pytest.mark.parametrize(
    ("text", "value"),
    [("5T", 5 * 2**40), ("500G", 500 * 2**30), ("1024", 1024), ("2GiB", 2 * 2**30), ("x", None)],
)
def test_sizes_read_as_profiles_write_them(text: str, value: int | None) -> None:
    assert size_bytes(text) == value


@pytest.mark.parametrize(
    ("node", "key"),
    [
        ({"work": {"path": "$WORK", "inodes": 3}}, "cluster.storage.work.inodes"),
        ({"work": {"path": "$WORK", "quota": "lfs quota"}}, "cluster.storage.work.quota"),
        ({"work": {"path": "$WORK", "quota": []}}, "cluster.storage.work.quota"),
        ({"work": {"files": 3}}, "cluster.storage.work.path"),
        ({"work": {"path": "$WORK", "files": -1}}, "cluster.storage.work.files"),
        ({"work": {"path": "$WORK", "bytes": "lots"}}, "cluster.storage.work.bytes"),
        ({"work": "$WORK"}, "cluster.storage.work"),
    ],
)
def test_a_bad_tier_is_refused_naming_its_key(node: dict, key: str) -> None:
    with pytest.raises(SpecError) as err:
        storage_tiers(node)
    assert key in str(err.value)


def test_a_quota_command_is_an_argument_list() -> None:
    (work,) = storage_tiers({"work": {"path": "$WORK", "quota": ["lfs", "quota", "$WORK"]}})
    assert work.quota == ("lfs", "quota", "$WORK")


# Reports as the programs print them (Lustre manual, "lfs quota"; quota(1) with -w).
LFS = """Disk quotas for grp abc (gid 5000):
     Filesystem  kbytes   quota   limit   grace   files   quota   limit   grace
   /lustre/work  1048576       0 5368709120       -  499000       0  500000       -
"""
LFS_WRAPPED = """Disk quotas for prj 4242 (pid 4242):
     Filesystem  kbytes   quota   limit   grace   files   quota   limit   grace
/lustre/fswork/projects/rech/abc
                 2048*    1024    4096  6d23h59m  120  100  0  7d
"""
LFS_HUMAN = """Disk quotas for usr bob (uid 6000):
     Filesystem    used   quota   limit   grace   files   quota   limit   grace
    /mnt/lustre  4.5G      0k     5G       -   1.2k       0      2k       -
"""
LINUX = """Disk quotas for user root (uid 0):
     Filesystem  blocks   quota   limit   grace   files   quota   limit   grace
     /dev/loop0      16       0   20000               2       0      50
"""


@pytest.mark.parametrize(
    ("report", "left"),
    [
        (LFS, QuotaLeft(files=1000, bytes=(5368709120 - 1048576) * 1024)),
        # Past both soft limits (the `*`, the grace times): nothing left.
        (LFS_WRAPPED, QuotaLeft(files=0, bytes=0)),
        (LFS_HUMAN, QuotaLeft(files=800, bytes=int(0.5 * 2**30))),
        (LINUX, QuotaLeft(files=48, bytes=(20000 - 16) * 1024)),
        # Limits of 0 are none.
        (LINUX.replace("20000", "0").replace("50", "0"), QuotaLeft(files=None, bytes=None)),
        ("quota: no limits for you\n", None),
        ("Filesystem  Size  Used Avail Use% Mounted on\n/dev/x 1G 1G 0 100% /\n", None),
    ],
    ids=["lfs", "lfs-wrapped-past-soft", "lfs-human", "linux-quota", "no-limits", "prose", "df"],
)
def test_a_quota_report_says_what_is_left(report: str, left: QuotaLeft | None) -> None:
    assert quota_left(report) == left


@pytest.mark.parametrize(
    ("path", "tier"),
    [("/s/ckpt/run", "scratch"), ("/w/runs/a", "work"), ("/w/fast/x", "inner"), ("/wx", None)],
)
def test_a_path_is_on_the_tier_of_its_longest_root(path: str, tier: str | None) -> None:
    assert tier_of(path, TIERS, EXPANDED) == tier


def request(**changes: object) -> Request:
    values: dict = dict(
        runs=10, ranks=2, keep_last=3, keep_best=False, checkpoint_files=14,
        checkpoint_bytes=1000, run_dir="/w/runs", checkpoint_dir=None, log_dir="/w/logs",
    )  # fmt: skip
    values.update(changes)
    return Request(**values)


def test_checkpoints_on_scratch_leave_work_the_kept_copies() -> None:
    on_work = {w.what: w for w in writes(request())}
    assert on_work["checkpoint folders"].files == 10 * 4 * 15  # keep_last + the one being saved
    moved = {w.what: w for w in writes(request(checkpoint_dir="/s/ckpt", keep_best=True))}
    assert moved["checkpoint folders"].where == "/s/ckpt"
    assert moved["kept checkpoints"].files == 10 * 2 * 15  # the newest and the best
    assert moved["kept checkpoints"].bytes == 10 * 2 * 1000


def test_a_shortfall_names_the_tier_and_what_it_writes_there() -> None:
    planned = writes(request())
    work = Room(device=1, files=500, bytes=None, tier="work")
    lines = shortfalls(planned, {w.where: work for w in planned})
    assert len(lines) == 1 and "files on work (/w/runs)" in lines[0] and "500 are left" in lines[0]
    roomy = Room(device=1, files=10_000, bytes=10**9, tier="work")
    assert shortfalls(planned, {w.where: roomy for w in planned}) == []


@pytest.mark.parametrize(
    ("age", "kept", "said"),
    [(25.0, False, True), (10.0, False, False), (25.0, True, False)],
)
def test_a_scratch_checkpoint_near_its_purge_is_named(age: float, kept: bool, said: bool) -> None:
    scratch = StorageTier("scratch", "$SCRATCH", purge_days=30)
    note = purge_note("/w/runs/a", 30, age, scratch, kept)
    assert (note is not None) == said
    assert purge_note("/w/runs/a", 30, 99.0, StorageTier("work", "$WORK"), False) is None


def test_a_run_directory_on_scratch_is_named_with_a_way_that_keeps_it() -> None:
    scratch = StorageTier("scratch", "$SCRATCH", purge_days=30)
    note = purge_note("/s/runs/a", 30, 25.0, scratch, kept=False, linked=False)
    assert note is not None and "jzk ckpt archive /s/runs/a --to $STORE" in note
    assert "move the run directory off scratch" in note and "kept" not in note
