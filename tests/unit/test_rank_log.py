"""Every rank's lines, whole and labelled, in train.log (runtime/rank_log.py)."""

from __future__ import annotations

import io
import os
import threading
import time
from pathlib import Path

from jeanzay_kit.rundir.rank_lines import label, lines_of_rank, ranks_in
from jeanzay_kit.rundir.run_directory import RunDir
from jeanzay_kit.runtime.rank_log import LineTee, Pump, mark_start, open_log


def test_a_tee_writes_through_and_copies_whole_lines(tmp_path: Path) -> None:
    shown = io.StringIO()
    tee = LineTee(shown, open_log(RunDir(tmp_path)), label(3))
    for piece in ("step 1", " | loss 0.5\npartial", " line\n", " 10%\r 50%\r100%\n", "tail"):
        tee.write(piece)
    assert shown.getvalue() == "step 1 | loss 0.5\npartial line\n 10%\r 50%\r100%\ntail"
    assert (tmp_path / "train.log").read_text() == (
        "[rank 3] step 1 | loss 0.5\n[rank 3] partial line\n[rank 3] 100%\n"
    )  # a progress bar's last state; "tail" waits for its newline
    assert tee.isatty() is False  # asked of the stream it wraps (tqdm decides on it)


def test_pumps_of_two_processes_never_cut_a_line(tmp_path: Path) -> None:
    fd, lock = open_log(RunDir(tmp_path)), threading.Lock()
    sink = io.BytesIO()
    pipes = [os.pipe() for _ in range(2)]
    pumps = [
        Pump(open(r, "rb", buffering=0), sink, fd, label(rank), lock)  # noqa: SIM115
        for rank, (r, _w) in enumerate(pipes)
    ]
    for pump in pumps:
        pump.start()
    for i in range(100):
        for rank, (_r, w) in enumerate(pipes):
            os.write(w, f"r{rank}-{i}-".encode())  # half a line from each, interleaved
    for _r, w in pipes:
        os.write(w, b"end\n")
        os.close(w)
    for pump in pumps:
        pump.join(timeout=10)
    lines = sink.getvalue().decode().splitlines()
    assert sorted(lines) == sorted(
        "".join(f"r{rank}-{i}-" for i in range(100)) + "end" for rank in range(2)
    )
    text = (tmp_path / "train.log").read_text()
    assert ranks_in(text) == [0, 1]
    assert (
        lines_of_rank(text, 1)
        == lines[[line.startswith("r1") for line in lines].index(True)] + "\n"
    )


def test_each_start_is_numbered(tmp_path: Path) -> None:
    for _ in range(2):
        mark_start(RunDir(tmp_path), "jzk: start {n} of the run on host at now")
    assert (tmp_path / "train.log").read_text().splitlines() == [
        "jzk: start 1 of the run on host at now",
        "jzk: start 2 of the run on host at now",
    ]


def test_output_without_a_newline_is_a_sign_of_life(tmp_path: Path) -> None:
    """Progress dots (`print(".", end="", flush=True)`) tell the local hang watch the
    script is alive, as on Slurm, where the watch reads the log's size: a review found
    only whole lines counted here."""
    fd, lock = open_log(RunDir(tmp_path)), threading.Lock()
    read, write = os.pipe()
    pump = Pump(open(read, "rb", buffering=0), io.BytesIO(), fd, label(0), lock)  # noqa: SIM115
    pump.start()
    os.write(write, b"...")
    deadline = time.monotonic() + 10
    while pump.last_time == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert pump.last_time > 0 and pump.last_line == ""  # heard, though no line ended
    os.close(write)
    pump.join(timeout=10)
