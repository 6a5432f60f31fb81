"""Storage tiers for real (issue 71): three small filesystems made here (tmpfs, mounted as
root, with set inodes and bytes) stand in for Jean Zay's scratch, work and store.

- A run whose checkpoints would exceed work's file count is refused by `jzk validate`
  before anything starts, with a change that passes (the checkpoints on scratch); a
  project whose frozen code would, by `jzk submit` and `jzk tune`.
- A run with its checkpoints on scratch ends with its newest and its best checkpoints
  (checkpoint.keep_best) kept on work;
  scratch purged, the next command goes on from the kept one, and ends with the digest
  of the same commands with nothing purged.
- `jzk ckpt archive` puts the run's checkpoints in one file on store, and `jzk ckpt
  restore` brings them back bit for bit.
- The run directory removed, its checkpoints left on scratch: the same command is
  refused in one line, not resumed from them unseen.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.distributed.conftest import REPO
from tests.mounts import small_filesystem

JZK = str(Path(sys.executable).parent / "jzk")
TINY = ("train.log_every=5", "train.eval_every=0", "checkpoint.every_steps=10")


@pytest.fixture(scope="module")
def tiers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    root = tmp_path_factory.mktemp("tiers")
    with ExitStack() as stack:
        yield {
            "scratch": stack.enter_context(small_filesystem(root / "scratch", 64)),
            # About 60 free inodes: a run's record fits, its checkpoints (4 x 15 files) do not.
            "work": stack.enter_context(small_filesystem(root / "work", 64, inodes=59)),
            "store": stack.enter_context(small_filesystem(root / "store", 64, inodes=7)),
        }


def storage(tiers: dict[str, Path]) -> tuple[str, ...]:
    """The tiers as a profile declares them (cluster.storage), on the command line."""
    return (
        f"+cluster.storage.scratch={{path:'{tiers['scratch']}',purge_days:30}}",
        f"+cluster.storage.work={{path:'{tiers['work']}',files:500000}}",
        f"+cluster.storage.store={{path:'{tiers['store']}'}}",
    )


def archives(store: Path) -> list[Path]:
    return sorted(p for p in store.iterdir() if p.name != "lost+found")  # ext4's own


def jzk(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([JZK, *args], cwd=cwd, capture_output=True, text=True, timeout=240)


def train(run_dir: Path, *overrides: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "train.py", *TINY, *overrides, f"hydra.run.dir={run_dir}"]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def test_checkpoints_past_works_file_count_are_refused_before_the_start(tiers) -> None:
    run_dir = tiers["work"] / "refused"
    request = ("train.steps=20", *storage(tiers), f"job.run_dir={run_dir}")
    done = jzk("validate", *request)
    assert done.returncode != 0, done.stdout
    err = done.stderr
    assert "does not fit where it writes" in err and "files on work" in err, err
    hint = err.split("HINT: ", 1)[1].split(" (the scratch tier)")[0]
    assert hint == f"checkpoint.dir={tiers['scratch']}/jzk-checkpoints", err
    passed = jzk("validate", *request, hint)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "storage         scratch:" in passed.stdout and "storage         work:" in passed.stdout
    assert not run_dir.exists()  # nothing written by the refusal


TUNE = ("tune.n_trials=3", "tune.params={optim.lr: 'tag(log, interval(1e-4, 1e-1))'}")


@pytest.mark.parametrize(
    "command, extra",
    [
        ("submit", ()),
        ("tune", TUNE),
        ("validate", ("job.entry=part_0.py",)),
        ("validate -m", ("job.entry=part_0.py", "job.args=[a],[b]")),
    ],
    ids=["submit", "tune", "validate-a-script", "validate-a-scripts-sweep"],
)
def test_a_code_snapshot_past_works_file_count_is_refused_before_the_queue(
    tiers, tmp_path: Path, command: str, extra: tuple[str, ...]
) -> None:
    """A project of 80 files whose logs (and so its frozen code) go on work: `jzk submit`
    and `jzk tune` count the snapshot, once, and refuse before anything is written;
    `jzk validate` of a script of the project says what submit would (it said OK)."""
    project = tmp_path / "project"
    project.mkdir()
    for i in range(80):
        (project / f"part_{i}.py").write_text(f"X = {i}\n")
    logs = tiers["work"] / "logs"
    request = ("cluster=slurm_local", *storage(tiers), f"job.log_dir={logs}")
    done = jzk(
        *command.split(), *request, *extra, f"job.run_dir={tiers['scratch']}/run", cwd=project
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stdout + done.stderr
    assert "does not fit where it writes" in done.stderr, done.stderr
    assert "files on work" in done.stderr and "code snapshot 80" in done.stderr, done.stderr
    assert not logs.exists() and not (tiers["scratch"] / "run").exists()


def test_a_work_too_full_to_keep_the_checkpoints_is_said_and_the_run_ends(
    tiers, tmp_path: Path
) -> None:
    """Work holds the run's record but not a checkpoint more (30 free inodes, a
    checkpoint takes 12): the run ends as it trained, says in one line that its
    checkpoints are only on scratch and what to do, and leaves no half copy on work."""
    with small_filesystem(tmp_path / "work", 64, inodes=30) as work:
        run_dir = work / "run"
        fast = (
            *storage(tiers),
            f"checkpoint.dir={tiers['scratch']}/full",
            "checkpoint.keep_last=1",
            "checkpoint.writer_threads=2",  # 12 files a checkpoint on any machine
        )
        done = train(run_dir, "train.steps=20", *fast)
        assert "Traceback" not in done.stdout + done.stderr, done.stderr[-3000:]
        said = [x for x in done.stdout.splitlines() if "were not all kept in" in x]
        assert len(said) == 1 and f"jzk ckpt archive {run_dir} --to $STORE" in said[0], said
        assert not list((run_dir / "kept").glob("*")), list((run_dir / "kept").iterdir())
        assert (run_dir / "checkpoints" / "step-20" / "manifest.json").is_file()


def test_a_run_directory_on_scratch_near_its_purge_is_named(tiers) -> None:
    run_dir = tiers["scratch"] / "whole-run"
    train(run_dir, "train.steps=10", *storage(tiers))
    old = time.time() - 25 * 86400
    os.utime(run_dir / "checkpoints" / "step-10", (old, old))
    shown = jzk("status", str(run_dir))
    assert "step 10, is on scratch and was written 25 days ago" in shown.stderr, shown
    assert f"jzk ckpt archive {run_dir} --to $STORE" in shown.stderr
    assert "move the run directory off scratch" in shown.stderr
    # Its checkpoints on checkpoint.dir, but kept/ on scratch too: no safer for it.
    linked = tiers["scratch"] / "whole-run-linked"
    fast = f"checkpoint.dir={tiers['scratch']}/fast"
    train(linked, "train.steps=10", *storage(tiers), fast)
    assert (linked / "kept" / "step-10" / "manifest.json").is_file()
    os.utime(linked / "checkpoints" / "step-10", (old, old))
    shown = jzk("status", str(linked))
    assert "step 10, is on scratch and was written 25 days ago" in shown.stderr, shown


def test_one_writer_thread_is_the_hint_that_fits_and_a_run_writes_its_fewer_files(
    tmp_path: Path,
) -> None:
    """A work tier with 40 free inodes, no scratch, one checkpoint kept already: the one
    change left is fewer DCP files per rank (checkpoint.writer_threads=1); the run it
    passes writes a checkpoint of 2 ranks x (1 shard + rank-<r>.pt) + 4 shared files."""
    with small_filesystem(tmp_path / "work", 64, inodes=40) as work:
        run_dir = work / "run"
        request = (
            "train.steps=10",
            "checkpoint.keep_last=1",
            f"+cluster.storage.work={{path:'{work}',files:500000}}",
            f"job.run_dir={run_dir}",
        )
        done = jzk("validate", *request)
        assert done.returncode == 2, done.stdout[-2000:] + done.stderr
        assert "HINT: checkpoint.writer_threads=1 (fewer files, slower saves)" in done.stderr
        assert jzk("validate", *request, "checkpoint.writer_threads=1").returncode == 0
        train(run_dir, "train.steps=10", "checkpoint.keep_last=1", "checkpoint.writer_threads=1")
        files = [p for p in (run_dir / "checkpoints" / "step-10").rglob("*") if p.is_file()]
        assert len(files) == 2 * 2 + 4, sorted(str(p) for p in files)


# What the site's quota program prints (quota(1) -w; `lfs quota` prints the same columns):
# the project has used 460 of its 500 files. A stand-in for it: this machine has no
# Lustre, and its kernel no quota support (CONFIG_QUOTA) for a real one on ext4.
QUOTA_REPORT = """Disk quotas for group abc (gid 5000):
     Filesystem  blocks   quota   limit   grace   files   quota   limit   grace
      /gpfswork   20480       0 5368709120            460       0     500
"""


def test_the_quota_commands_report_is_what_is_left(tiers, tmp_path: Path) -> None:
    """A work tier with thousands of free inodes but a quota 40 files from full (its
    `quota:` command says so): the request is refused on the quota's count, before the
    start, with the change that fits; a quota command that fails is said in one line and
    the filesystem's own count is checked instead."""
    report = tmp_path / "site-quota"
    report.write_text(f"#!/bin/sh\ncat <<'EOF'\n{QUOTA_REPORT}EOF\n")
    report.chmod(0o755)
    run_dir = tiers["scratch"] / "quota-run"
    work = f"+cluster.storage.work={{path:'{tiers['scratch']}',quota:['{report}']}}"
    request = ("train.steps=20", f"job.run_dir={run_dir}", "checkpoint.keep_last=1", work)
    done = jzk("validate", *request)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stdout + done.stderr
    assert "files on work" in done.stderr and "where 40 are left" in done.stderr, done.stderr
    hint = "checkpoint.writer_threads=1"
    assert f"HINT: {hint} (fewer files, slower saves)" in done.stderr, done.stderr
    fits = jzk("validate", *request, hint)
    assert fits.returncode == 0, fits.stdout + fits.stderr
    assert "left 40 files" in fits.stdout, fits.stdout
    assert "(site-quota's report counted)" in fits.stdout, fits.stdout
    roomy = jzk("validate", *request[:3], request[3].replace(str(report), "/no/such/quota"))
    assert roomy.returncode == 0, roomy.stdout + roomy.stderr
    warned = [x for x in roomy.stderr.splitlines() if "cluster.storage.work.quota" in x]
    assert len(warned) == 1 and "/no/such/quota" in warned[0], roomy.stderr
    assert not run_dir.exists()


def test_a_sweep_past_works_file_count_is_refused_before_the_queue(tiers) -> None:
    """`python train.py -m` through the toolkit's launcher, 2 points on work: refused as
    `jzk submit` refuses one run, before anything is frozen or queued."""
    sweep_dir = tiers["work"] / "sweep"
    argv = [sys.executable, "train.py", "-m", "cluster=slurm_local", "train.steps=20",
            "checkpoint.writer_threads=1", *storage(tiers), f"hydra.sweep.dir={sweep_dir}",
            "optim.lr=0.1,0.05"]  # fmt: skip
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=240)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    said = [x for x in done.stderr.splitlines() if "does not fit where it writes" in x]
    assert len(said) == 1 and "files on work" in said[0], done.stderr[-3000:]
    assert "HINT: checkpoint.dir=" in said[0], said
    # Only Hydra's own record of the sweep, written before any launcher is called.
    assert [p.name for p in sweep_dir.rglob("*")] == ["multirun.yaml"]


@pytest.mark.timeout(600)
def test_scratch_checkpoints_are_kept_on_work_survive_a_purge_and_archive(
    tiers, tmp_path: Path
) -> None:
    run_dir = tiers["work"] / "run"
    # The best checkpoint is the worst loss here (mode max), so it is not the newest one:
    # both are kept on work.
    best = ("train.eval_every=10", "checkpoint.keep_best=loss", "checkpoint.keep_best_mode=max")
    on_scratch = (
        *storage(tiers),
        f"checkpoint.dir={tiers['scratch']}/ckpt",
        "checkpoint.keep_last=1",
        *best,
    )
    train(run_dir, "train.steps=30", *on_scratch)
    link = run_dir / "checkpoints"
    fast = Path(os.readlink(link))
    assert link.is_symlink() and Path(os.readlink(link)).is_relative_to(tiers["scratch"])
    kept = sorted(p.name for p in (run_dir / "kept").iterdir())
    assert kept == ["step-10", "step-30"], kept
    assert all((run_dir / "kept" / step / "manifest.json").is_file() for step in kept)
    # 25 days later, were it not kept on work: jzk status names it before scratch's purge.
    old = time.time() - 25 * 86400
    os.utime(Path(os.readlink(link)) / "step-30", (old, old))
    shutil.move(run_dir / "kept", tmp_path / "kept")
    shown = jzk("status", str(run_dir))
    assert "step 30, is on scratch and was written 25 days ago" in shown.stderr, shown
    assert f"jzk ckpt archive {run_dir} --to $STORE" in shown.stderr
    shutil.move(tmp_path / "kept", run_dir / "kept")
    # The purge: scratch loses every file between two jobs of the run.
    for child in tiers["scratch"].iterdir():
        shutil.rmtree(child)
    again = train(run_dir, "train.steps=40", *on_scratch)
    assert f"checkpoint.dir: {fast} has none (purged?): step 30 copied back" in again.stdout
    assert "(step 30)" in again.stdout, again.stdout
    # The same two commands with the checkpoints in the run directory, nothing purged.
    plain = tmp_path / "plain"
    train(plain, "train.steps=30", "checkpoint.keep_last=1", *best)
    train(plain, "train.steps=40", "checkpoint.keep_last=1", *best)
    digest = (run_dir / "model_final.sha256").read_text()
    assert digest == (plain / "model_final.sha256").read_text()

    # The archive: one file on store, the run's checkpoints back bit for bit.
    before = sums(run_dir)
    packed = jzk("ckpt", "archive", str(run_dir), "--to", str(tiers["store"]), "--remove")
    assert packed.returncode == 0, packed.stdout + packed.stderr
    (archive,) = archives(tiers["store"])
    assert archive.suffix == ".tar" and not list(run_dir.glob("kept/step-*"))
    # Started again now, the run would train from step 0 (it did, unsaid): refused in
    # one line with the command that brings its checkpoints back, before it writes.
    cmd = [sys.executable, "train.py", *TINY, "train.steps=50", *on_scratch]
    done = subprocess.run(
        [*cmd, f"hydra.run.dir={run_dir}"], cwd=REPO, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"were archived into {archive} and removed" in done.stderr, done.stderr
    assert f"jzk ckpt restore '{archive}' '{run_dir}'" in done.stderr, done.stderr
    assert not list(fast.glob("step-*")) and "Traceback" not in done.stderr
    listed = jzk("ckpt", "list", str(run_dir))
    assert "no checkpoints" in listed.stdout and f"archived into {archive}" in listed.stdout
    assert " archived " in jzk("status", str(run_dir)).stdout  # its CKPT column
    restored = jzk("ckpt", "restore", str(archive), str(run_dir))
    assert restored.returncode == 0, restored.stdout + restored.stderr
    assert "every file matches its checksum" in restored.stdout
    assert sums(run_dir) == before and not (run_dir / "archived.json").exists()
    # Archived again at the same place: it replaces the earlier archive, whose every
    # checkpoint it holds; once the run lacks one of them, it is refused instead.
    replaced = jzk("ckpt", "archive", str(run_dir), "--to", str(tiers["store"]))
    assert "replacing the earlier archive there" in replaced.stdout, replaced.stdout
    gone = sorted(run_dir.glob("kept/step-*"))[0]  # the newest and the best are kept
    shutil.rmtree(gone)
    refused = jzk("ckpt", "archive", str(run_dir), "--to", str(tiers["store"]))
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert f"holds 1 checkpoint(s) the run no longer has (kept/{gone.name})" in refused.stderr
    assert archive.stat().st_size > 0 and archives(tiers["store"]) == [archive]

    # The run directory removed, its checkpoints left on scratch: the same command would
    # go on from them unseen; it is refused in one line instead, before it writes.
    shutil.rmtree(run_dir)
    cmd = [sys.executable, "train.py", *TINY, "train.steps=40", *on_scratch]
    done = subprocess.run(
        [*cmd, f"hydra.run.dir={run_dir}"], cwd=REPO, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"checkpoint.dir: {fast} holds step-40 of an earlier run of {run_dir}" in done.stderr
    assert f"rm -r '{fast}'" in done.stderr and "Traceback" not in done.stderr
    assert not (run_dir / "starts.jsonl").exists() and not (run_dir / "checkpoints").exists()


def sums(run_dir: Path) -> dict[str, str]:
    return {
        str(p.relative_to(run_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
        for place in ("checkpoints", "kept")
        for p in sorted((run_dir / place).rglob("*"))
        if p.is_file()
    }
