"""The health gate (issue 58 point 4): its rules (node/health_rules.py) over plain values,
its probe on this machine's real folders, its place in the rendered script. On Slurm:
tests/slurm/test_broken_nodes.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jeanzay_kit.node.health import gate, job_ending, probe, read_answers
from jeanzay_kit.node.health_rules import (
    END,
    NO_ANSWER,
    REQUEUE,
    TRAIN,
    GpuCheck,
    NodeHealth,
    decide_gate,
    gpu_problems,
    scratch_folders,
)
from jeanzay_kit.rundir.run_directory import RunDir

GIB = 2**30


@pytest.mark.parametrize(
    ("expected", "checks", "said"),
    [
        (2, [GpuCheck(0, 79 * GIB, 80 * GIB), GpuCheck(1, 79 * GIB, 80 * GIB)], []),
        (4, [GpuCheck(0, 79 * GIB, 80 * GIB)], ["gpus: 1 of the 4 GPU(s) Slurm gave"]),
        (1, [GpuCheck(0, 0, 0, "CUDA error: uncorrectable ECC error encountered")],
         ["gpu 0: CUDA error: uncorrectable ECC error encountered"]),
        (1, [GpuCheck(0, 40 * GIB, 80 * GIB)], ["gpu 0: 40.0 of 80.0 GiB free"]),
    ],
)  # fmt: skip
def test_gpu_problems(expected: int, checks: list[GpuCheck], said: list[str]) -> None:
    found = gpu_problems(expected, checks)
    assert len(found) == len(said), found
    for line, start in zip(found, said, strict=True):
        assert line.startswith(start), found


OK = NodeHealth("n1", notes=("GPU checks skipped: cluster.device=cpu",), seconds=1.2)
TMP = "TMPDIR: /t cannot be written on n{}: Not a directory"


@pytest.mark.parametrize(
    ("answers", "nodes", "action", "bad"),
    [
        ([OK, NodeHealth("n2")], ["n1", "n2"], TRAIN, []),
        ([OK, NodeHealth("n2", (TMP.format(2),))], ["n1", "n2"], REQUEUE, ["n2"]),
        ([OK], ["n1", "n2"], REQUEUE, ["n2"]),  # n2's probe died: no answer
        ([NodeHealth("n1", (TMP.format(1),))], ["n1"], REQUEUE, ["n1"]),  # one node: it
        # every node of two failing the same check: not the nodes
        ([NodeHealth("n1", (TMP.format(1),)), NodeHealth("n2", (TMP.format(2),))],
         ["n1", "n2"], END, ["n1", "n2"]),
        ([NodeHealth("n1", ("gpu 0: ECC",)), NodeHealth("n2", (TMP.format(2),))],
         ["n1", "n2"], REQUEUE, ["n1", "n2"]),
        ([], ["n1", "n2"], REQUEUE, ["n1", "n2"]),  # the whole step died: no node to blame
    ],
)  # fmt: skip
def test_the_gate_decides(answers, nodes, action, bad) -> None:
    decision = decide_gate(answers, nodes)
    assert (decision.action, sorted(decision.bad)) == (action, bad), decision
    if action == TRAIN:
        assert decision.line == "2 node(s) fine in 1.2 s (GPU checks skipped: cluster.device=cpu)"
    if action == END:
        assert "HINT: point $TMPDIR at a folder" in decision.line, decision.line
    if answers == [OK]:
        assert decision.bad["n2"] == (NO_ANSWER,)


def test_scratch_folders_are_the_set_ones() -> None:
    assert scratch_folders({}) == [("TMPDIR", "/tmp")]
    env = {"TMPDIR": "/l/t", "SCRATCH": "/s", "JOBSCRATCH": ""}
    assert scratch_folders(env) == [("TMPDIR", "/l/t"), ("SCRATCH", "/s")]


def test_the_probe_finds_an_unwritable_folder_for_real(tmp_path: Path) -> None:
    """A TMPDIR under a regular file cannot take a write, even for root; the run
    directory is made when missing."""
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    env = {"TMPDIR": str(blocker / "tmp"), "SLURMD_NODENAME": "n7"}
    answer = probe(RunDir.of(tmp_path / "run"), 0, "cpu", env)
    assert answer.node == "n7" and (tmp_path / "run").is_dir()
    assert answer.problems == (f"TMPDIR: {blocker / 'tmp'} cannot be written on n7: "
                               "Not a directory",)  # fmt: skip
    assert answer.notes == ("GPU checks skipped: cluster.device=cpu",)
    assert not list((tmp_path / "run").iterdir())  # its test file removed
    fine = probe(
        RunDir.of(tmp_path / "run"), 0, "cpu", {"TMPDIR": str(tmp_path), "SLURMD_NODENAME": "n7"}
    )
    assert fine.problems == ()


def test_the_gate_records_the_node_and_says_it_outside_slurm(tmp_path: Path, capsys) -> None:
    """Outside a job there is nothing to requeue: said, exit 1; the node's end is in
    endings.jsonl as unhealthy_node, the node named (what the requeue would leave out)."""
    bad = NodeHealth("n2", (TMP.format(2),))
    text = "srun: a line that is not JSON\n" + json.dumps(OK.record()) + "\n"
    text += json.dumps(bad.record()) + "\n"
    assert read_answers(text) == [OK, bad]
    assert gate(RunDir(tmp_path), text, {"SLURM_JOB_NODELIST": "n[1-2]"}) == 1
    said = capsys.readouterr().err
    assert "jzk: health gate: 1 of 2 node(s) failed: n2: TMPDIR: /t" in said, said
    assert "not a Slurm job: nothing to requeue" in said
    record = json.loads((tmp_path / "endings.jsonl").read_text())
    assert (record["kind"], record["node"], record["nodes"]) == ("unhealthy_node", "n2", ["n2"])
    assert gate(RunDir(tmp_path), json.dumps(OK.record()), {"SLURM_JOB_NODELIST": "n1"}) == 0


def test_the_probe_prints_one_json_line(tmp_path: Path) -> None:
    """The module as the rendered script runs it (no torch import on a CPU cluster)."""
    out = subprocess.run(
        [sys.executable, "-m", "jeanzay_kit.node.health", "probe", f"--run-dir={tmp_path}",
         "--expect-gpus=2", "--device=cpu"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    (answer,) = read_answers(out.stdout)
    assert answer.problems == () and answer.notes, out


def test_gpus_slurm_gave_that_cuda_does_not_see_are_a_problem(tmp_path: Path) -> None:
    """This machine has no CUDA device: a node told it has 2 GPUs fails, in words."""
    answer = probe(RunDir(tmp_path), 2, "cuda", {"TMPDIR": str(tmp_path), "SLURMD_NODENAME": "n1"})
    assert answer.problems == ("gpus: 0 of the 2 GPU(s) Slurm gave are visible",), answer


def test_a_gpu_check_that_hangs_is_a_problem_not_a_wait(monkeypatch) -> None:
    import threading

    from jeanzay_kit.node import health

    never = threading.Event()
    monkeypatch.setattr(health, "GPU_CHECK_SECONDS", 0.2)
    monkeypatch.setattr(health, "gpu_checks", lambda: never.wait(30) and [])
    assert health.timed_gpu_problems(1) == [
        "gpus: the check did not end in 0.2 s (a GPU or its driver hangs)"
    ]
    never.set()


@pytest.mark.parametrize(
    ("earlier", "action"),
    [
        ([], REQUEUE),
        ([{"TMPDIR"}], REQUEUE),
        ([{"TMPDIR"}, {"gpu 0"}], REQUEUE),
        ([{"TMPDIR"}, {"TMPDIR", "gpu 0"}], END),  # the third node in turn: not the nodes
    ],
)
def test_the_same_check_on_node_after_node_ends_the_job(earlier, action) -> None:
    decision = decide_gate([NodeHealth("n3", (TMP.format(3),))], ["n3"], earlier)
    assert decision.action == action, decision
    if action == END:
        assert decision.line.startswith("3 nodes of this job in turn failed the same check")
        assert "HINT: point $TMPDIR at a folder" in decision.line


def test_the_checks_are_read_back_from_the_recorded_evidence() -> None:
    from jeanzay_kit.node.health_rules import checks_of

    evidence = "; ".join([TMP.format(1), "gpu 0: CUDA error: uncorrectable ECC error"])
    assert checks_of(evidence) == {"TMPDIR", "gpu 0"}


def test_a_sweeps_array_runs_the_gate_in_each_tasks_own_run_directory(tmp_path: Path) -> None:
    """The jeanzay launcher's arrays (launch/arrays.py): submitit's `setup` lines run the
    gate before its srun, array task i in point i's run directory; off with the key."""
    from jeanzay_kit.launch.arrays import SweepPoint, plan_arrays
    from jeanzay_kit.launch.request import spec_of

    base = ["cluster=slurm_local", "resources.gpus_per_node=1"]
    dirs = [str(tmp_path / "point 0"), str(tmp_path / "it's 1")]
    points = [SweepPoint(i, (), d, spec_of(base, None)) for i, d in enumerate(dirs)]
    (plan,) = plan_arrays(points, max_array_size=10)
    setup = [str(line) for line in plan.parameters["setup"]]  # type: ignore[union-attr]
    assert any("jeanzay_kit.node.health probe" in line for line in setup)
    pick = [line for line in setup if line.startswith("jzk_run_dirs=") or "jzk_gate_dir=" in line]
    for task, expected in enumerate(dirs):
        said = subprocess.run(
            ["bash", "-c", "\n".join([*pick, 'printf %s "$jzk_gate_dir"'])],
            env={"SLURM_ARRAY_TASK_ID": str(task)}, capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        assert said == expected
    off = [SweepPoint(0, (), dirs[0], spec_of([*base, "watchdog.health_gate=false"], None))]
    (plan,) = plan_arrays(off, max_array_size=10)
    assert not any("health" in str(line) for line in plan.parameters["setup"])  # type: ignore[union-attr]


class Squeue:
    """squeue's answer for the job, as the logic around it is tested (slurm/commands.py's
    seam); the real cluster's is tests/slurm/test_broken_nodes.py's."""

    def __init__(self, states: str) -> None:
        self.states = states

    def run(self, argv, timeout: float = 60.0, cwd: str | None = None):
        assert argv[0] == "squeue", argv  # asked, never acted on
        return subprocess.CompletedProcess(argv, 0, self.states, "")


@pytest.mark.parametrize(
    ("states", "ending"),
    [("RUNNING\n", False), ("COMPLETING\n", True), ("CANCELLED\n", True), ("", True)],
)
def test_a_job_slurm_no_longer_runs_is_ending(states: str, ending: bool) -> None:
    assert job_ending({"SLURM_JOB_ID": "42"}, Squeue(states)) is ending


def test_a_cancel_during_the_gate_requeues_nothing_and_blames_no_node(tmp_path: Path) -> None:
    """scancel while the nodes are checked: the probes end with the job and leave no
    answer, and SIGTERM reaches the gate. A requeue then brought a cancelled job back
    (Slurm requeues finished jobs too) and left its two nodes out: it pended for ever.
    Run as the batch script runs it, the signal sent for real."""
    env = {**os.environ, "SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "n[1-2]"}
    gate_cmd = [sys.executable, "-m", "jeanzay_kit.node.health", "gate", "--run-dir", "run"]
    proc = subprocess.Popen(gate_cmd, cwd=tmp_path, env=env, stdin=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.monotonic() + 60
    while not _catches(proc.pid, signal.SIGTERM):  # its handler set: then the signal
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate("", timeout=60)  # the probes' pipe closes empty
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "the job is ending" in err and "nothing requeued" in err, err
    assert not (tmp_path / "run" / "endings.jsonl").exists()


def _catches(pid: int, signum: int) -> bool:
    """The process has set what `signum` does (/proc/<pid>/status: SigCgt, a handler;
    SigIgn, ignored), as the gate does first thing."""
    masks = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return any(int(masks[key], 16) >> (signum - 1) & 1 for key in ("SigCgt", "SigIgn"))
