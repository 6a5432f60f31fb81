"""Unwritable run directories: what the message says (pure), and the real check."""

from __future__ import annotations

import errno
import subprocess
import sys
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
    tasks, one refused "tune.dir ... cannot be written: No such file or directory").

    Four processes of their own, each checking 100 times: a fork of this test process
    (multiprocessing's fork pool) hung once in the suite, a child copying a lock another
    thread of the xdist worker held."""
    folder = tmp_path / "shared"
    checks = [sys.executable, "-c", _CHECKER, str(folder)]
    procs = [subprocess.Popen(checks, stdout=subprocess.PIPE, text=True) for _ in range(4)]
    refused = [p.communicate(timeout=60)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0]
    assert [r for r in refused if r.strip()] == []
    assert list(folder.iterdir()) == []


_CHECKER = """
import sys
from pathlib import Path
from jeanzay_kit.ckpt.writable import check_writable
from jeanzay_kit.errors import RunDirError

for _ in range(100):
    try:
        check_writable(Path(sys.argv[1]), "tune.dir")
    except RunDirError as err:
        print(err)
"""


def test_json_lines_skip_a_cut_line_and_a_line_that_is_not_an_object(tmp_path: Path) -> None:
    """metrics.jsonl, endings.jsonl, attempts.jsonl: one reader (durable_io.py)."""
    from jeanzay_kit.durable_io import read_json_lines

    path = tmp_path / "records.jsonl"
    assert read_json_lines(path) == []  # no file yet: no records
    path.write_text('{"step": 1}\n[1, 2]\n"text"\n{"step": 2}\n{"step": 3, "lo')
    assert read_json_lines(path) == [{"step": 1}, {"step": 2}]
