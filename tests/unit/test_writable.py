"""Unwritable run directories: what the message says (pure), and the real check."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from jeanzay_kit.ckpt.writable import check_writable, unwritable_message
from jeanzay_kit.errors import RunDirError


@pytest.mark.parametrize(
    ("code", "says"),
    [
        (errno.EROFS, "is on a read-only filesystem"),
        (errno.EACCES, "is not writable by this user (uid 1000)"),
        (errno.EPERM, "is not writable by this user (uid 1000)"),
        (errno.ENOSPC, "is on a full filesystem or quota (512 bytes free)"),
        (errno.EDQUOT, "is on a full filesystem or quota (512 bytes free)"),
        (errno.ENOTDIR, "has a file where a folder should be"),
        (errno.EIO, "cannot be written"),
    ],
)
def test_message_names_key_path_reason_and_fix(code: int, says: str) -> None:
    text = unwritable_message("job.run_dir", "/ro/run", code, "detail", 512, 1000)
    assert text.startswith(f"job.run_dir=/ro/run {says}: detail. HINT: ")
    assert "job.run_dir to a directory you can write" in text


def test_a_file_in_the_way_is_refused_and_a_good_dir_is_left_clean(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(RunDirError, match="has a file where a folder should be"):
        check_writable(tmp_path / "file" / "run")
    check_writable(tmp_path / "a" / "b")
    assert list((tmp_path / "a" / "b").iterdir()) == []  # the probe file is gone


def test_processes_checking_one_folder_at_once_are_all_let_through(tmp_path: Path) -> None:
    """Two tasks of one study (or of one array) check the same folder at the same moment:
    one's probe removed by the other is no reason to refuse (seen: `jzk tune` with two
    tasks, one refused "tune.dir ... cannot be written: No such file or directory")."""
    import multiprocessing

    folder = tmp_path / "shared"
    # fork: the children are copies of this one, nothing to import again (Linux).
    with multiprocessing.get_context("fork").Pool(4) as pool:
        refused = pool.map(_refusal, [folder] * 400)
    assert [r for r in refused if r] == []
    assert list(folder.iterdir()) == []


def _refusal(folder: Path) -> str:
    try:
        check_writable(folder, "tune.dir")
    except RunDirError as err:
        return str(err)
    return ""
