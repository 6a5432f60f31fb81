"""The start-up's clock (runtime/startup.py): parts that add up to the time to the first
step, and a second start in one process that does not count the first one's time."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from jeanzay_kit.rundir.run_directory import RunDir
from jeanzay_kit.runtime import startup


def test_parts_add_up_and_the_start_is_written_once(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(startup, "_CLOCK", None)
    monkeypatch.setattr(startup, "_FIRST", True)
    process = startup.process_start_time()
    assert process is not None and process <= time.time()
    first = startup.begin(str(int(process) - 5))  # Slurm started the job 5 s earlier
    assert first.parts["launch"] == pytest.approx(5, abs=1.01)
    first.mark("rendezvous")
    first.add("first_batch", 0.5)
    record = first.record()
    assert record["startup_s"] == pytest.approx(sum(first.parts.values()), abs=0.01)
    assert record["startup_first_batch_s"] == 0.5
    startup.write_start(RunDir(tmp_path), {"start_step": 0})
    startup.write_start(RunDir(tmp_path), {"start_step": 0})  # the same start: not twice
    (line,) = (tmp_path / "starts.jsonl").read_text().splitlines()
    assert json.loads(line)["parts"].keys() == first.parts.keys()
    # Another start in this process: a new clock, counted from now, not from the process.
    again = startup.clock()
    assert again is not first and "launch" not in again.parts
    assert again.parts["imports"] < 1.0


def test_a_fresh_process_is_as_old_as_its_interpreter_start() -> None:
    """The start is read to 10 ms (/proc/uptime and the process's start tick), not to the
    whole second of the boot time: a new interpreter that asks at once is not 0.7 s old."""
    import subprocess
    import sys

    code = "import time; from jeanzay_kit.runtime import startup\n"
    code += "print(time.time() - startup.process_start_time())"
    ages = [float(subprocess.run([sys.executable, "-c", code], capture_output=True,
                                 text=True, check=True).stdout) for _ in range(3)]  # fmt: skip
    assert 0 <= min(ages) < 0.4, ages  # the interpreter and one small import
