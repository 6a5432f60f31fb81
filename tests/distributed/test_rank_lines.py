"""A local script's ranks never cut each other's lines, and train.log keeps them.

A user's script, module-level, in a project of its own: two processes each write 200
lines in ten flushed pieces (before issue 43 about one line in ten came out mixed), and
`jzk logs RUN_DIR --rank N` reads one rank back from <run_dir>/train.log.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

JZK = str(Path(sys.executable).parent / "jzk")
CHATTY = """
import os, sys
rank = int(os.environ["RANK"])
for i in range(200):
    for piece in range(10):
        sys.stdout.write(f"r{rank}" * 5)
        sys.stdout.flush()
    print()
    if i % 50 == 0:
        print(f"rank {rank} warns at {i}", file=sys.stderr)
"""


def test_lines_of_two_ranks_come_out_whole_and_by_rank(tmp_path: Path) -> None:
    project = tmp_path / "chatty project"
    project.mkdir()
    (project / "chatty.py").write_text(CHATTY)
    run = subprocess.run(
        [JZK, "train", "job.entry=chatty.py", "resources.gpus_per_node=2"],
        cwd=project, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    lines = [x for x in run.stdout.splitlines() if not x.startswith("jzk:")]
    assert len(lines) == 400
    assert all(re.fullmatch(r"(r0){50}|(r1){50}", x) for x in lines), [
        x for x in lines if not re.fullmatch(r"(r0){50}|(r1){50}", x)
    ][:3]
    (run_dir,) = (project / "outputs").glob("jzk-*")
    one = subprocess.run([JZK, "logs", str(run_dir), "--rank", "1"], capture_output=True, text=True)
    assert one.returncode == 0, one.stderr
    assert one.stdout.count("r1" * 50 + "\n") == 200 and "r0" not in one.stdout
    assert [x for x in one.stdout.splitlines() if "warns" in x] == [
        f"rank 1 warns at {i}" for i in (0, 50, 100, 150)
    ]
    whole = subprocess.run([JZK, "logs", str(run_dir)], capture_output=True, text=True).stdout
    assert whole.startswith("jzk: start 1 of the run on ")
    assert whole.count("[rank 0] ") == whole.count("[rank 1] ") == 204
    missing = subprocess.run(
        [JZK, "logs", str(run_dir), "--rank", "5"], capture_output=True, text=True
    )
    assert missing.returncode != 0 and "no line of rank 5 (ranks found: 0, 1)" in missing.stderr
    # -f on a run that has ended prints what there is and its exit code at once.
    followed = subprocess.run(
        [JZK, "logs", str(run_dir), "-f", "--rank", "0"], capture_output=True, text=True, timeout=60
    )
    assert followed.returncode == 0 and "the run ended COMPLETED" in followed.stderr
    assert followed.stdout.count("r0" * 50 + "\n") == 200
