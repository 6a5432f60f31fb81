"""The classes of an attempt's end (ending/ending_rules.py), from real log excerpts.

Each excerpt is what PyTorch, NCCL or Slurm printed in a user's report (the issue or
thread is named), as train.log or a Slurm log holds it; the classifier must find the
class and keep the line that shows it."""

from __future__ import annotations

import pytest

from jeanzay_kit.ending.ending_rules import (
    CHECKPOINT_UNREADABLE,
    DATA_ERROR,
    DISK_FULL,
    GPU_HARDWARE,
    GPU_OOM,
    HANG,
    HOST_OOM,
    NODE_FAILURE,
    NONFINITE,
    PREEMPTED,
    STOPPED,
    TIME_LIMIT,
    UNKNOWN,
    USER_ERROR,
    Verdict,
    attempt_part,
    classify,
    decide,
    storm,
    unprefixed,
)
from jeanzay_kit.rundir.run_directory import RunDir

# pytorch/pytorch#16417 (torch 2.2's wording, 'capacity of')
CUDA_OOM = """[rank 1] Traceback (most recent call last):
[rank 1]   File "/w/train.py", line 88, in step
[rank 1]     loss = model(x).sum()
[rank 1] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 22.00 MiB. GPU 0 has a \
total capacity of 23.65 GiB of which 11.06 MiB is free. Including non-PyTorch memory, this \
process has 23.60 GiB memory in use.
[rank 0] rank 0 stopped: a peer left the job (Connection closed by peer)
"""
# pytorch/pytorch#59778 (torch 1.x's wording)
CUDA_OOM_OLD = (
    "RuntimeError: CUDA out of memory. Tried to allocate 2.26 GiB (GPU 0; 6.00 GiB total "
    "capacity; 781.59 MiB already allocated; 3.03 GiB free; 1.24 GiB reserved in total by PyTorch)"
)
# huggingface/accelerate#1192: one rank's GPU, its peers then terminated by the launcher
ECC = """Traceback (most recent call last):
  File "/w/train.py", line 12, in <module>
    model.to(device)
RuntimeError: CUDA error: uncorrectable ECC error encountered
CUDA kernel errors might be asynchronously reported at some other API call,so the \
stacktrace below might be incorrect.
For debugging consider passing CUDA_LAUNCH_BLOCKING=1.
[rank1]:[E321 02:07:08.414640780 ProcessGroupNCCL.cpp:607] [Rank 1] Watchdog caught \
collective operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=466119168, \
NumelOut=466119168, Timeout(ms)=600000) ran for 600067 milliseconds before timing out.
"""
# hiyouga/LlamaFactory#7396
WATCHDOG_LINE = (
    "[rank 0] jzk train: hang: rank 1 (host vm, pid 9862) has written no heartbeat and made "
    "no progress for 5 s (the process is stopped, dead, or hung in native code), at step "
    "40/1000 in phase own_step; watchdog.stall_seconds=5. Python stacks of the live ranks: "
    "/tmp/trial/docs/examples/own_loop/rehearsal/run/hang-40\n"
)
NCCL_TIMEOUT = (
    "[rank0]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=466119168, "
    "NumelOut=466119168, Timeout(ms)=600000) ran for 600060 milliseconds before timing out.\n"
)
NCCL_ERROR = (
    "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
    "ProcessGroupNCCL.cpp:1275, unhandled system error (run with NCCL_DEBUG=INFO for details)\n"
)
# vllm-project/vllm#10523 (NCCL 2.18: the version and NCCL's class on the line)
NCCL_SYSTEM = (
    "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
    "ProcessGroupNCCL.cpp:1333, unhandled system error (run with NCCL_DEBUG=INFO for "
    "details), NCCL version 2.18.1\n"
)
# NVIDIA/nccl#2076: a peer's node with a broken InfiniBand link
NCCL_REMOTE = (
    "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/"
    "NCCLUtils.hpp:268, remote process exited or there was a network error, NCCL version "
    "2.21.5\nncclRemoteError: A call failed possibly due to a network error or a remote "
    "process exiting prematurely.\n"
)
# NVIDIA/NVSentinel#155 (the kernel's Xid line, as a site's epilog copies it to the job's
# log) and Bumblebee-Project/Bumblebee#554 (the driver's words without an Xid)
XID = "NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus.\n"
OFF_THE_BUS = "[   49.261458] NVRM: GPU at 0000:01:00.0 has fallen off the bus.\n"
# nextflow-io/nextflow#5932
SLURM_OOM = (
    "slurmstepd: error: Detected 1 oom_kill event in StepId=11300781.0. Some of the step "
    "tasks have been OOM Killed.\nsrun: error: sdumont6156: task 0: Out Of Memory\n"
)
# ZettaAI/zetta_utils#671, SystemsGenetics/GEMmaker#242
TIMEOUT = (
    "srun: Job step aborted: Waiting up to 47 seconds for job step to finish.\n"
    "slurmstepd: error: *** JOB 494583 ON n12 CANCELLED AT 2024-04-20T09:09:37 DUE TO TIME "
    "LIMIT ***\n"
)
PREEMPTION = (
    "slurmstepd: error: *** JOB 32391783 ON cn119 CANCELLED AT 2021-06-18T13:05:36 DUE TO "
    "PREEMPTION ***\n"
)
NODE_FAIL = (
    "srun: error: Node failure on jzxh042\nsrun: error: Nodes jzxh042 are still not responding\n"
)
# Two tasks of n1 killed (jzk rehearse --slurm's node_lost): their peers' errors follow.
PEER_KILLED = """rank 3 stopped: a peer left the job (Connection closed by peer [127.0.10.1]:19885)
Error executing job with overrides: []
Traceback (most recent call last):
  File "/p/train.py", line 9, in main
RuntimeError: [/gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.10.1]:19885.
srun: error: n1: tasks 0-1: Killed
srun: error: n2: tasks 2-3: Exited with exit code 1
"""
SCRIPT_PEER_KILLED = """Traceback (most recent call last):
  File "/p/train_session.py", line 40, in train
RuntimeError: [/gloo/tcp/pair.cc:537] Read error [127.0.10.1]:6029: Connection reset by peer.
srun: error: n1: task 1: Exited with exit code 137
srun: error: n1: task 0: Exited with exit code 1
srun: error: n2: task 2: Exited with exit code 1
"""
# A dataset raising in a DataLoader worker: torch's wrapper, the original, the toolkit's note
DATASET = """[rank 0] rank 0 failed:
[rank 0] Traceback (most recent call last):
[rank 0]   File "/k/jeanzay_kit/train/loop.py", line 120, in train
[rank 0]     batch = next(batches)
[rank 0] ValueError: Caught ValueError in DataLoader worker process 0.
[rank 0] Original Traceback (most recent call last):
[rank 0]   File "/v/torch/utils/data/_utils/worker.py", line 349, in _worker_loop
[rank 0]     data = fetcher.fetch(index)
[rank 0]   File "/p/userpkg/corrupt.py", line 8, in __getitem__
[rank 0]     raise ValueError(f"corrupt record {index}")
[rank 0] ValueError: corrupt record 1500
[rank 0] jzk: dataset index 1500
[rank 0]
[rank 1] rank 1 stopped: a peer left the job (Connection closed by peer)
"""
ENOSPC = """Traceback (most recent call last):
  File "/w/save.py", line 3, in save
    handle.write(blob)
OSError: [Errno 28] No space left on device
"""
EDQUOT = "OSError: [Errno 122] Disk quota exceeded: '/lustre/fswork/projects/x/ckpt/step-9'\n"
NAN = (
    "jzk train: the loss is NaN or infinite at step 57 on some rank; nothing was saved "
    "at that step. HINT: lower optim.lr\n"
)
BUG = """Traceback (most recent call last):
  File "/p/model.py", line 30, in forward
    return self.head(h.view(h.size(0), -1))
RuntimeError: mat1 and mat2 shapes cannot be multiplied (16x64 and 128x4)
"""

# torch.distributed's excepthook (distributed_c10d.py, once a process group exists) puts
# `[rankN]: ` before every line of the traceback; torchrun --tee puts `[default<local>]:`
# before that, train.log its own `[rank N] ` label.
RANKED_BUG = """[rank0]: Traceback (most recent call last):
[rank0]:   File "/p/train.py", line 41, in <module>
[rank0]:     main()
[rank0]:   File "/p/train.py", line 37, in main
[rank0]:     raise ValueError("bad value")
[rank0]: ValueError: bad value
"""
RANKED_BUG_12 = RANKED_BUG.replace("[rank0]:", "[rank12]:")
# Issue 65: timm's --resume read a file that was not its checkpoint (torch.load under
# weights_only=False, a pickle of something else); and a truncated zip checkpoint.
UNPICKLABLE = """[rank0]: Traceback (most recent call last):
[rank0]:   File "/p/train.py", line 1181, in <module>
[rank0]:     main()
[rank0]:   File "/p/timm/models/_helpers.py", line 98, in resume_checkpoint
[rank0]:     checkpoint = torch.load(checkpoint_path, map_location='cpu', weights_only=False)
[rank0]:   File "/v/torch/serialization.py", line 1551, in load
[rank0]:     return _legacy_load(opened_file, map_location, pickle_module, **pickle_load_args)
[rank0]: _pickle.UnpicklingError: invalid load key, 'n'.
"""
TRUNCATED = """Traceback (most recent call last):
  File "/p/train.py", line 20, in <module>
    state = torch.load("snapshot.pt")
  File "/v/torch/serialization.py", line 1500, in load
    with _open_zipfile_reader(opened_file) as opened_zipfile:
RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central directory
"""
CARRIED_ON_FULL = (
    "WARNING: checkpoint step-600 could not be written to /r/checkpoints/.tmp-step-600: "
    "[Errno 28] No space left on device (rank 0). HINT: free space. Training goes on "
    "(checkpoint.on_write_error=continue): the next save tries again\n"
)
TEED_BUG = "".join(f"[default0]:{line}\n" for line in RANKED_BUG.splitlines())
LABELLED_BUG = "".join(f"[rank 3] {line}\n" for line in RANKED_BUG.splitlines())
RANKED_DATASET = "".join(
    f"[rank1]: {line[len('[rank 0] ') :]}\n" for line in DATASET.splitlines()[:12]
)


@pytest.mark.parametrize(
    ("log", "exit_code", "state", "kind", "shown"),
    [
        (CUDA_OOM, 1, "", GPU_OOM, "Tried to allocate 22.00 MiB. GPU 0 has a total capacity of"),
        (CUDA_OOM_OLD, 1, "", GPU_OOM, "6.00 GiB total capacity"),
        (ECC, 1, "", GPU_HARDWARE, "CUDA error: uncorrectable ECC error encountered"),
        (NCCL_TIMEOUT, 1, "", HANG, "Watchdog caught collective operation timeout"),
        (NCCL_ERROR, 1, "", HANG, "NCCL error in"),
        (NCCL_SYSTEM, 1, "", HANG, "unhandled system error"),
        (NCCL_REMOTE, 1, "", HANG, "remote process exited or there was a network error"),
        (XID, 1, "", GPU_HARDWARE, "Xid (PCI:0000:44:00): 79, GPU has fallen off the bus"),
        (OFF_THE_BUS + NCCL_TIMEOUT, 1, "", GPU_HARDWARE, "has fallen off the bus"),
        (SLURM_OOM, 137, "", HOST_OOM, "oom_kill event"),
        (SLURM_OOM, 1, "OUT_OF_MEMORY", HOST_OOM, "oom_kill event"),
        (TIMEOUT, 0, "TIMEOUT", TIME_LIMIT, "DUE TO TIME LIMIT"),
        (TIMEOUT, 15, "", TIME_LIMIT, "DUE TO TIME LIMIT"),
        (PREEMPTION, 0, "PREEMPTED", PREEMPTED, "DUE TO PREEMPTION"),
        (NODE_FAIL, 1, "", NODE_FAILURE, "Node failure on jzxh042"),
        (PEER_KILLED, 137, "", UNKNOWN, "srun: error: n1: tasks 0-1: Killed"),
        # A script task's rank killed: its watch ends 137, its peers' gloo lost it (a
        # session loop as job.entry under jzk rehearse --slurm: it read user_error).
        (SCRIPT_PEER_KILLED, 1, "", UNKNOWN, "n1: task 1: Exited with exit code 137"),
        # One rank's own error, the others killed by srun after it: the error decides.
        (BUG + "srun: error: n1: task 1: Killed\n", 137, "", USER_ERROR, "mat1 and mat2"),
        ("", 1, "NODE_FAIL", NODE_FAILURE, "sacct State=NODE_FAIL"),
        (DATASET, 1, "", DATA_ERROR, "ValueError: corrupt record 1500 (dataset index 1500)"),
        (ENOSPC, 1, "", DISK_FULL, "No space left on device"),
        (EDQUOT, 1, "", DISK_FULL, "Disk quota exceeded"),
        (NAN, 2, "", NONFINITE, "loss is NaN or infinite at step 57"),
        (BUG, 1, "", USER_ERROR, "RuntimeError: mat1 and mat2 shapes cannot be multiplied"),
        (RANKED_BUG, 1, "", USER_ERROR, "ValueError: bad value"),
        (RANKED_BUG_12, 1, "", USER_ERROR, "ValueError: bad value"),
        (UNPICKLABLE, 1, "", CHECKPOINT_UNREADABLE, "UnpicklingError: invalid load key"),
        (TRUNCATED, 1, "", CHECKPOINT_UNREADABLE, "failed finding central directory"),
        (TEED_BUG, 1, "", USER_ERROR, "ValueError: bad value"),
        (LABELLED_BUG, 1, "", USER_ERROR, "ValueError: bad value"),
        (RANKED_DATASET, 1, "", DATA_ERROR, "corrupt record 1500 (dataset index 1500)"),
        ("", 3, "", STOPPED, "exit 3"),
        ("", 4, "", HANG, "watchdog"),
        # A task that died of a signal, nothing in its log: its exit code named.
        ("", 137, "", UNKNOWN, "exit 137: killed by SIGKILL"),
        ("", 138, "", UNKNOWN, "exit 138: killed by SIGUSR1"),  # every signal, one table
        ("", 1, "", UNKNOWN, "exit 1"),
        # The watchdog's own line, as a session loop's launcher relays it (exit 1): what
        # it found, whole, not cut in the middle of the stacks' folder.
        (WATCHDOG_LINE, 1, "", HANG, "phase own_step; watchdog.stall_seconds=5"),
        (BUG, 4, "", HANG, "watchdog"),  # the watchdog's exit wins over a stopped rank's words
        (ECC, 4, "", GPU_HARDWARE, "uncorrectable ECC error"),
        # A full disk the run carried on from (on_write_error=continue), then a rank
        # killed: the kill decides, not the warning (a rehearsal's finding, issue 70).
        (CARRIED_ON_FULL + PEER_KILLED, 137, "", UNKNOWN, "Killed"),
        (CARRIED_ON_FULL + ENOSPC, 1, "", DISK_FULL, "No space left on device"),
    ],
)
def test_each_end_gets_its_class_and_evidence(
    log: str, exit_code: int, state: str, kind: str, shown: str
) -> None:
    verdict = classify(exit_code=exit_code, log=attempt_part(log, "jzk: start "), slurm_state=state)
    assert verdict.kind == kind, verdict
    assert shown in verdict.evidence, verdict
    assert "\n" not in verdict.evidence and len(verdict.evidence) <= 240


@pytest.mark.parametrize(
    ("line", "body", "rank"),
    [
        ("[rank0]: Traceback (most recent call last):", "Traceback (most recent call last):", 0),
        ("[rank12]:   File \"/p/x.py\", line 3", "  File \"/p/x.py\", line 3", 12),
        ("[rank 3] [rank3]: ValueError: bad", "ValueError: bad", 3),
        ("[default1]:[rank5]: ValueError: bad", "ValueError: bad", 5),
        ("[default1]:ValueError: bad", "ValueError: bad", None),
        ("[rank 0]", "", 0),
        ("[rank0]:[E321 02:07:08.4 ProcessGroupNCCL.cpp:607] x", "[E321 02:07:08.4 Pro"
         "cessGroupNCCL.cpp:607] x", 0),
        ("ValueError: [rank0]: not a prefix", "ValueError: [rank0]: not a prefix", None),
    ],
)  # fmt: skip
def test_rank_prefixes_are_read_off_a_line(line: str, body: str, rank: int | None) -> None:
    assert unprefixed(line) == (body, rank)


def test_a_prefixed_evidence_line_names_its_rank() -> None:
    assert classify(exit_code=1, log=NCCL_TIMEOUT).rank == 0
    assert classify(exit_code=1, log=CUDA_OOM).rank == 1


def test_only_the_newest_attempt_of_the_log_is_read() -> None:
    log = BUG + "jzk: start 2 of the run on n1 at 2026-11-27T10:00:00\n" + ENOSPC
    assert classify(exit_code=1, log=attempt_part(log, "jzk: start ")).kind == DISK_FULL
    log = ENOSPC + "jzk: start 2 of job 7 on n1\n" + BUG
    assert classify(exit_code=1, log=attempt_part(log, "jzk: start ")).kind == USER_ERROR


def test_the_dataset_index_is_kept() -> None:
    verdict = classify(exit_code=1, log=attempt_part(DATASET, "jzk: start "), step=4)
    assert verdict.index == 1500 and verdict.step == 4
    assert verdict.line() == (
        "data error at step 4: ValueError: corrupt record 1500 (dataset index 1500)"
    )


DATA = Verdict(DATA_ERROR, "ValueError: corrupt record 1500 (dataset index 1500)", 4, 1500)


@pytest.mark.parametrize(
    ("now", "previous", "new_checkpoint", "restarted", "retry"),
    [
        (DATA, None, False, False, True),  # the first failure: one retry
        (DATA, DATA, False, True, False),  # the same at the same step: ends
        (DATA, Verdict(DATA_ERROR, DATA.evidence, 9), True, True, True),  # moved on
        (Verdict(USER_ERROR, "KeyError: 'x'", 30), DATA, False, True, False),  # no checkpoint
        (Verdict(USER_ERROR, "KeyError: 'x'", 30), DATA, True, True, True),
        (Verdict(GPU_OOM, "CUDA out of memory", 7), None, True, False, False),  # at once
        (Verdict(DISK_FULL, "No space left on device", 7), None, True, False, False),
        (Verdict(GPU_HARDWARE, "ECC", 7), None, False, True, True),  # on other nodes
        (Verdict(NODE_FAILURE, "Node failure", 7), None, False, True, True),
        (Verdict(HANG, "exit 4", 7), Verdict(HANG, "exit 4", 7), False, True, False),
        (Verdict(HANG, "exit 4", 7), Verdict(HANG, "exit 4", 3), False, True, True),
        (Verdict(HANG, "exit 4"), Verdict(HANG, "exit 4"), False, True, True),  # no step known
    ],
)
def test_a_retry_only_where_it_can_help(
    now: Verdict, previous: Verdict | None, new_checkpoint: bool, restarted: bool, retry: bool
) -> None:
    decision = decide(now, previous, new_checkpoint=new_checkpoint, restarted_before=restarted)
    assert decision.retry is retry, decision
    assert decision.retry or decision.why


def test_a_restart_storm_is_restarts_without_a_new_checkpoint() -> None:
    same = [{"checkpoint": 20}] * 4
    assert storm(same, restarts=3)
    assert not storm(same, restarts=2)
    assert not storm(
        [{"checkpoint": 20}, {"checkpoint": 20}, {"checkpoint": 25}, {"checkpoint": 25}], 3
    )


def test_jzk_status_flags_a_restart_storm_and_shows_the_verdict(tmp_path) -> None:
    """Point 5: three restarts whose attempts left the same newest checkpoint are a storm,
    shown under the table and in --json; the newest end and its fix are shown too."""
    import json

    from jeanzay_kit.ending.endings import record_restart
    from jeanzay_kit.launch.run_files import run_progress
    from jeanzay_kit.launch.status import RunView, run_objects, status_table

    ending = {**DATA.record(), "checkpoint": 20, "job_id": None}
    (tmp_path / "endings.jsonl").write_text("".join(json.dumps(ending) + "\n" for _ in range(4)))
    for _ in range(3):
        record_restart(RunDir(tmp_path), "crash")
    view = RunView("local", str(tmp_path), progress=run_progress(RunDir(tmp_path)))
    table = status_table([view], {})
    assert "local: RESTART STORM: 3 restart(s)" in table, table
    assert "data error at step 4: ValueError: corrupt record 1500" in table, table
    assert "HINT: fix or skip the named sample" in table
    obj = run_objects([view], {}, {})[0]
    assert obj["restart_storm"] is True and obj["verdict"] == DATA_ERROR, obj

    (tmp_path / "endings.jsonl").write_text(json.dumps({**ending, "checkpoint": 25}) + "\n")
    calm = RunView("local", str(tmp_path), progress=run_progress(RunDir(tmp_path)))
    assert "RESTART STORM" not in status_table([calm], {})


def test_a_completed_run_records_its_end_so_an_earlier_failure_is_not_shown(tmp_path) -> None:
    """A Slurm job that failed once, was requeued and completed: its newest end is the
    completion (rank 0 records it), and jzk status shows no failure under it."""
    from jeanzay_kit.ending.endings import record_ending
    from jeanzay_kit.launch.run_files import run_progress
    from jeanzay_kit.launch.status import RunView, status_table
    from jeanzay_kit.node.worker_start import say_done
    from jeanzay_kit.train.loop import TrainResult

    record_ending(RunDir(tmp_path), DATA, job_id="42")
    say_done(RunDir(tmp_path), TrainResult(steps=30, final_loss=0.5, digest="d"), "42")
    progress = run_progress(RunDir(tmp_path), job_id="42")
    assert progress.verdict == "completed" and progress.evidence == (
        "completed at step 30: done: 30 steps"
    )
    assert "data error" not in status_table([RunView("42", str(tmp_path), progress=progress)], {})


def test_a_completed_script_starts_its_next_run_in_place_with_its_whole_budget(tmp_path) -> None:
    """A script's task 0 records its completion as the loop's rank 0 does: its newest
    end, and the restarts it spent moved to the history (a run of it again in place,
    which rerun_line announces, once started with its budget spent)."""
    import json

    from jeanzay_kit.ending.endings import (
        read_restarts,
        record_completed,
        record_restart,
        rerun_line,
    )

    run = RunDir(tmp_path)
    record_restart(run, "hang", "42")
    assert len(read_restarts(run)) == 1 and rerun_line(run, ["--resume"]) is None
    record_completed(run, "the command exited 0", job_id="42")
    assert read_restarts(run) == []
    assert len(json.loads(run.restarts.read_text())["history"]) == 1
    line = rerun_line(run, ["--resume"])
    assert line is not None and "--resume" in line and str(run) in line, line


def test_a_job_slurm_ended_itself_shows_sacct_s_state_as_its_end() -> None:
    """A time limit or node failure kills the batch script with the job: nothing was
    recorded, sacct's State is the evidence (jzk status, its --json)."""
    from jeanzay_kit.launch.status import JobState, RunProgress, RunView, run_objects, status_table

    view = RunView("77", "/r/x", progress=RunProgress(verdict="completed"))
    states = {"77": JobState("77", "NODE_FAIL", "01:00:00", "n3", "0:0", "sacct")}
    obj = run_objects([view], states, {})[0]
    assert obj["verdict"] == NODE_FAILURE and obj["evidence"] == (
        "node failure: sacct State=NODE_FAIL"
    ), obj
    assert "77: node failure: sacct State=NODE_FAIL. HINT: nothing to do" in status_table(
        [view], states
    )
    live = {"77": JobState("77", "RUNNING", "00:01:00", "n3")}  # squeue's: no end yet
    assert run_objects([view], live, {})[0]["verdict"] == "completed"


def test_a_requeued_stop_says_no_hint_while_its_next_attempt_runs() -> None:
    """An attempt stopped (exit 3) and the job requeued: while the next attempt is
    queued or running, `jzk status` does not tell the user to run the command again."""
    from jeanzay_kit.launch.status import JobState, RunProgress, RunView, ending_lines

    stop = RunProgress(verdict="stopped", evidence="exit 3: stopped", fix="run it again")
    view = RunView("5", "/r/s", progress=stop)
    running = {"5": JobState("5", "RUNNING", "00:00:40", "n1")}
    assert ending_lines([view], running) == []
    ended = {"5": JobState("5", "CANCELLED", "00:00:40", "n1", "0:0", "sacct")}
    assert ending_lines([view], ended) == ["", "5: exit 3: stopped. HINT: run it again"]


def test_a_process_killed_from_outside_is_not_its_peers_tracebacks() -> None:
    """A local run's rank killed by SIGKILL (jzk rehearse's kill_rank): its peers' errors
    ("Connection closed by peer") are not an error in the training code."""
    killed = classify(exit_code=-9, log=PEER_KILLED.split("srun:")[0], signal_name="SIGKILL")
    assert (killed.kind, killed.evidence) == (UNKNOWN, "killed by SIGKILL")
    assert classify(exit_code=1, log=BUG, signal_name=None).kind == USER_ERROR


CRASH = Verdict(UNKNOWN, "exit 1", step=12)
BROKEN_GPU = Verdict(GPU_HARDWARE, "CUDA error: uncorrectable ECC error", step=0, node="n1")


@pytest.mark.parametrize(
    ("verdict", "progressed", "other_nodes", "spent", "why", "retried"),
    [
        (CRASH, True, False, 0, None, True),  # restarted, one restart spent
        (CRASH, False, False, 0, "no progress", False),  # it would fail the same way
        (BROKEN_GPU, False, False, 0, "no progress", False),  # here: the same GPU again
        (BROKEN_GPU, False, True, 0, None, True),  # a Slurm job: another node can pass
        (CRASH, True, True, 2, "budget spent", False),  # preemption.max_restarts=2 used
    ],
    ids=["restart", "no progress", "node fault here", "node fault on slurm", "budget"],
)
def test_both_launchers_follow_one_rule_after_a_failure(
    tmp_path, verdict: Verdict, progressed: bool, other_nodes: bool, spent: int, why, retried
) -> None:
    """node/local.py and node/restart_job.py ask ending/endings.py: the attempt's end is
    recorded either way, and a restart is spent only when one is made."""
    import json

    from jeanzay_kit.ending.endings import read_restarts, record_restart, retry_after_failure

    run = RunDir(tmp_path)
    for _ in range(spent):
        record_restart(run, "crash")
    retry = retry_after_failure(
        run, verdict, since=1.0, progressed=progressed, limit=2, reason="crash",
        other_nodes=other_nodes,
    )  # fmt: skip
    assert retry.why == why and retry.decision is None
    assert len(read_restarts(run)) == spent + (why is None)
    assert retry.count == (spent + 1 if why is None else 0)
    (ended,) = [json.loads(line) for line in run.endings.read_text().splitlines()]
    assert ended["kind"] == verdict.kind and ended["retried"] is retried


def test_a_failure_that_repeats_is_not_retried_and_spends_no_restart(tmp_path) -> None:
    from jeanzay_kit.ending.endings import (
        CANNOT_PASS,
        read_restarts,
        record_ending,
        record_restart,
        retry_after_failure,
    )

    run = RunDir(tmp_path)
    data = Verdict(DATA_ERROR, "ValueError: corrupt record 1500", step=4)
    record_restart(run, "crash")
    record_ending(run, data, since=0.5, retried=True)
    retry = retry_after_failure(run, data, since=1.0, progressed=True, limit=3, reason="crash")
    assert retry.why == CANNOT_PASS and retry.decision is not None and not retry.decision.retry
    assert len(read_restarts(run)) == 1


def test_a_stop_never_claims_a_save_it_cannot_know() -> None:
    """A script of the user's that does not handle the time-limit warning dies of it; the
    run stops (exit 3) and goes on from the script's own newest checkpoint: its record
    does not claim a save on the signal (a user trial read one that never happened). A
    session loop may stop (exit 3) without saving first: a stop is not said to follow a
    save either (a rehearsal read "stopped after a save" for a loop that lost steps)."""
    stopped = classify(exit_code=3)
    assert (stopped.kind, stopped.evidence) == (
        STOPPED,
        "exit 3: stopped on a signal or a request; it goes on from its newest checkpoint",
    )
    died = classify(exit_code=3, signal_name="SIGUSR1")
    assert died.kind == STOPPED and "SIGUSR1, which the script does not handle" in died.evidence
    assert "after a save" not in died.evidence and "no save" in died.evidence
