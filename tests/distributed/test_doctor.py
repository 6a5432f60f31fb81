"""`jzk doctor` on this machine: the rank table, and a rank that never checks in is named."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch.multiprocessing as mp

from jeanzay_kit.errors import DoctorError
from jeanzay_kit.node.local import free_port, local_rank_infos

JZK = str(Path(sys.executable).parent / "jzk")


@pytest.mark.timeout(180)
def test_doctor_prints_one_row_per_rank(tmp_path: Path) -> None:
    result = subprocess.run(
        [JZK, "doctor", "resources.gpus_per_node=4", "--size-mb=1"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("RANK"))
    rows = [line.split() for line in lines[header + 1 : header + 5]]
    assert [r[0] for r in rows] == ["0", "1", "2", "3"]
    assert len({r[4] for r in rows}) == 4  # four processes (pids)
    assert all(r[8].startswith("127.0.0.1:") for r in rows)  # the master each derived
    assert "every rank answered" in result.stdout
    assert "bus bandwidth" in result.stdout
    # Rank 0's first line: the torch the job runs against the tested range.
    assert lines[0].startswith("torch ") and "the range jeanzay_kit was tested with" in lines[0]


def _rank(index: int, infos: list, queue) -> None:  # noqa: ANN001
    from jeanzay_kit.doctor.probe import probe_rank

    try:
        probe_rank(infos[index], "cpu", None, backend="gloo", timeout_s=3.0, size_mb=1)
        queue.put((index, "ok"))
    except DoctorError as err:
        queue.put((index, str(err)))


@pytest.mark.timeout(120)
def test_a_rank_that_never_starts_is_named() -> None:
    # World size 3, but rank 2's task never starts (a node that failed to launch it).
    infos = local_rank_infos(3, free_port())
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(i, infos, queue)) for i in (0, 1)]
    for proc in procs:
        proc.start()
    try:
        index, message = queue.get(timeout=90)
    finally:
        for proc in procs:
            proc.kill()
            proc.join()
    assert index == 0
    assert "rank(s) 2 of 3 did not check in within 3 s" in message, message
    assert "HINT" in message
