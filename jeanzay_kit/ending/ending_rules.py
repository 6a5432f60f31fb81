"""Why an attempt of a run ended, and whether another attempt can help. Pure.

Every end of an attempt gets one class from the evidence the toolkit has: the exit code
and signal of the step, sacct's State (PREEMPTED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY),
the attempt's part of the log (train.log: each rank's traceback, NCCL's and slurmstepd's
words) and the step its heartbeats reached. The class and its one line of evidence go
to the run's record (`endings.jsonl`, ending/endings.py), `jzk status` and `jzk report`.

A retry only where it can help (NVIDIA's resiliency extension counts restarts against
progress and has a "do not requeue" answer): a preemption, a time limit, a node failure,
a GPU hardware error and a hang are requeued; a failure that repeats (the same class and
message at the same step as the attempt before, or no new checkpoint since the last
restart) ends the run at once with its verdict and fix, as do an out of memory, a NaN
and a full disk, which no restart from the same checkpoint can pass.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from jeanzay_kit.distributed.ranks import parse_tasks_per_node
from jeanzay_kit.ending.codes import signal_of_exit
from jeanzay_kit.errors import HostlistError, RankEnvError
from jeanzay_kit.slurm_syntax.hostlist import expand_hostlist

PREEMPTED = "preempted"
TIME_LIMIT = "time_limit"
STOPPED = "stopped"
COMPLETED = "completed"
GPU_OOM = "gpu_oom"
HOST_OOM = "host_oom"
NONFINITE = "nan"
HANG = "hang"
NODE_FAILURE = "node_failure"
GPU_HARDWARE = "gpu_hardware"
DATA_ERROR = "data_error"
# The checkpoint a script resumes from could not be loaded (not a checkpoint, another
# model's, written half): another attempt would read the same file.
CHECKPOINT_UNREADABLE = "checkpoint_unreadable"
DISK_FULL = "disk_full"
USER_ERROR = "user_error"
# A node the health gate found broken before step 0 (node/health_rules.py).
UNHEALTHY = "unhealthy_node"
UNKNOWN = "unknown"

# Classes another attempt (on other nodes, after the queue) may pass.
WORTH_A_RETRY = frozenset(
    {PREEMPTED, TIME_LIMIT, STOPPED, NODE_FAILURE, GPU_HARDWARE, HANG, UNHEALTHY}
)
# Classes no restart from the same checkpoint passes: the run ends at the first.
ENDS_AT_ONCE = frozenset({GPU_OOM, HOST_OOM, NONFINITE, DISK_FULL, CHECKPOINT_UNREADABLE})
# Classes that name a node to leave out of the next attempt.
NODE_FAULTS = frozenset({NODE_FAILURE, GPU_HARDWARE, UNHEALTHY})

WORDS = {
    PREEMPTED: "preempted",
    TIME_LIMIT: "time limit",
    STOPPED: "stopped",
    COMPLETED: "completed",
    GPU_OOM: "out of GPU memory",
    HOST_OOM: "out of host memory",
    NONFINITE: "NaN/Inf loss",
    HANG: "hang/collective timeout",
    NODE_FAILURE: "node failure",
    GPU_HARDWARE: "GPU hardware error",
    DATA_ERROR: "data error",
    CHECKPOINT_UNREADABLE: "checkpoint could not be loaded",
    DISK_FULL: "disk full/quota",
    USER_ERROR: "error in the training code",
    UNHEALTHY: "a node failed the health gate",
    UNKNOWN: "unknown",
}

FIXES = {
    PREEMPTED: "nothing to do: the job is requeued and resumes from its newest checkpoint",
    TIME_LIMIT: "nothing to do: the job is requeued; a longer resources.time means fewer requeues",
    STOPPED: "run the same command again: it resumes from the newest checkpoint",
    COMPLETED: "-",
    GPU_OOM: "lower train.micro_batch_size (auto finds the largest that fits), shard the "
    "model (fsdp) or ask for GPUs with more memory; `jzk validate` with the run's "
    "overrides prints the plan's per-GPU estimate (gpu memory)",
    HOST_OOM: "ask for more host memory (resources.mem or more CPUs per task) or fewer "
    "loader workers (loader.num_workers)",
    NONFINITE: "lower optim.lr, clip gradients, or skip such steps (train.nonfinite=skip)",
    # Whether it was retried is the run's record (a sweep's point and a local script are
    # not), never said here.
    HANG: "read the hang-<step>/ stacks: a rank that never reached the collective is named first",
    NODE_FAILURE: "nothing to do: the job is requeued without that node",
    GPU_HARDWARE: "nothing to do: the job is requeued without that node; tell the site's "
    "support if it repeats",
    DATA_ERROR: "fix or skip the named sample in the dataset (its __getitem__), then submit "
    "again: it resumes from its newest checkpoint",
    DISK_FULL: "free space or quota (idrquota on Jean Zay) where the run writes, or keep "
    "fewer checkpoints (checkpoint.keep)",
    USER_ERROR: "fix the error in the traceback, then submit again: it resumes from its "
    "newest checkpoint",
    CHECKPOINT_UNREADABLE: "the file the run resumes from is no checkpoint this code can "
    "load: job.resume_args must name what the run itself saves (its own output place, "
    "e.g. --resume output/train/<experiment>/last.pth.tar); to start from another file, "
    "pass it in job.args (timm: --initial-checkpoint); to start over, give the run a new "
    "job.run_dir. Submitting the same command again would read the same file",
    UNHEALTHY: "nothing to do: the job was requeued without that node before any training "
    "(watchdog.health_gate); tell the site's support if it repeats",
    UNKNOWN: "read the job's log",
}

# sacct's State of an allocation, as a class.
SLURM_STATES = {
    "PREEMPTED": PREEMPTED,
    "TIMEOUT": TIME_LIMIT,
    "DEADLINE": TIME_LIMIT,
    "NODE_FAIL": NODE_FAILURE,
    "OUT_OF_MEMORY": HOST_OOM,
}

# A line of the attempt's log as a class, first match wins: a GPU's hardware error
# before the peers' NCCL timeouts it causes, an out of memory before the collective
# its rank never reached, the toolkit's words before the scheduler's.
PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (kind, re.compile(pattern, re.I))
    for kind, pattern in (
        (GPU_HARDWARE, r"uncorrectable ECC error|ECC_UNCORRECTABLE|\bXid\b|GPU is lost|"
         r"fallen off the bus|CUDA error: uncorrectable|NVML_ERROR_GPU_IS_LOST|"
         r"CUDA error: unspecified launch failure"),
        (GPU_OOM, r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory"),
        (HOST_OOM, r"oom[-_]kill|task \d+: Out Of Memory|Killed process \d+ .*out of memory"),
        (DISK_FULL, r"No space left on device|Disk quota exceeded|\[Errno 28\]|\[Errno 122\]|"
         r"ENOSPC|EDQUOT"),
        (NONFINITE, r"loss is NaN or infinite|NonFiniteLoss|loss is nan\b"),
        (NODE_FAILURE, r"Node failure on|DUE TO NODE FAIL|NODE_FAIL"),
        (PREEMPTED, r"DUE TO PREEMPTION"),
        (TIME_LIMIT, r"DUE TO TIME LIMIT"),
        (HANG, r"Watchdog caught collective operation timeout|collective operation timeout|"
         r"NCCL communicator was aborted|NCCL error|DistBackendError|watchdog: rank \d+ .*stuck|"
         r"no heartbeat"),
    )
)  # fmt: skip

# The toolkit's watchdog's line: `jzk train: hang: rank 1 (...) ...; watchdog.stall_seconds=5.
# Python stacks of the live ranks: <run_dir>/hang-<step>`.
WATCHDOG_SAID = re.compile(r"hang: (rank \d+ .*?)(?:\. Python stacks of the live ranks: .*)?$")

# A task killed from outside (its node lost, an administrator's kill -9), as srun says
# it: "Killed", or exit 137 (128 + SIGKILL) from a script task, whose watch outlives the
# script it runs and ends as it died (node/script_task.py). srun also kills the others
# of a step after one fails (--kill-on-bad-exit): so it decides only when the log's
# tracebacks are all peers that lost it.
KILLED = re.compile(
    r"^srun: error: \S+: tasks? [\d,-]+: (?:Killed|Exited with exit code 137)$", re.M
)
# A rank's error that says only that a peer went away (gloo, the toolkit's own note).
PEER_LOST = re.compile(
    r"Connection closed by peer|Connection reset by peer|a peer left the job|Broken pipe"
)

# What a launcher writes before a rank's line, one or several: the toolkit's label in
# train.log (`[rank 3] `, runtime/rank_log.py), torch.distributed's excepthook once a
# process group exists (`[rank3]: ` on every line of a traceback) and torchrun --tee's
# `[default3]:` (its role and local rank). Read without them, a traceback is one again.
RANK_PREFIX = re.compile(r"\[rank (\d+)\](?: |$)|\[rank(\d+)\]: ?|\[[A-Za-z_]\w*?\d+\]:")
EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Failure|Failed|Interrupt)\b:?")
WRAPPER = re.compile(r"Caught \w+ in DataLoader worker process")
DATA_FRAMES = re.compile(r"__getitems?__|torch/utils/data/|DataLoader worker process")
# A checkpoint that torch.load (or pickle under it) cannot read: the exception, and the
# frames that show a load.
UNREADABLE = re.compile(
    r"UnpicklingError|Weights only load failed|PytorchStreamReader failed|invalid load key|"
    r"failed finding central directory|not a zip file|Ran out of input"
)
LOAD_FRAMES = re.compile(r"torch/serialization\.py|torch\.load|pickle|in load\b")
# The note the toolkit adds to an exception from a dataset (runtime/seeded_samples.py).
INDEX_NOTE = "jzk: dataset index "
INDEX = re.compile(re.escape(INDEX_NOTE) + r"(\d+)")
MEMORY = re.compile(r"Tried to allocate [\d.]+ [KMGT]iB.*?(capacit?y of [\d.]+ [KMGT]iB|"
                    r"[\d.]+ [KMGT]iB total capacity)")  # fmt: skip
NODE_NAME = re.compile(r"Node failure on (\S+)")
# What the run carried on from, as the loop says it (train/loop.py): a save that met a
# full disk under checkpoint.on_write_error=continue, a NaN's update dropped under
# train.nonfinite=skip. Such a line names no end: a later crash of the same attempt is
# what its own lines say (a rehearsal found a killed rank called "disk full" by it).
CARRIED_ON = re.compile(
    r"^WARNING: .*\((?:checkpoint\.on_write_error=continue|train\.nonfinite=skip)\)"
)
EVIDENCE_CHARS = 240


@dataclass(frozen=True)
class Verdict:
    """One end of an attempt: its class, the one line that shows it, the step its
    heartbeats reached, for a data error the dataset index, and the rank whose line it
    is and the node at fault (a node failure, a GPU hardware error)."""

    kind: str
    evidence: str
    step: int | None = None
    index: int | None = None
    rank: int | None = None
    node: str | None = None

    @property
    def words(self) -> str:
        return WORDS.get(self.kind, self.kind)

    @property
    def fix(self) -> str:
        return FIXES.get(self.kind, FIXES[UNKNOWN])

    def line(self) -> str:
        """`data error at step 4: ValueError: corrupt record 1500`"""
        at = f" at step {self.step}" if self.step is not None else ""
        return f"{self.words}{at}: {self.evidence}"

    def same_failure(self, other: Verdict) -> bool:
        """The same class and message at the same step: it would fail so again."""
        return (self.kind, self.evidence, self.step) == (other.kind, other.evidence, other.step)

    def record(self) -> dict[str, object]:
        return {"kind": self.kind, "evidence": self.evidence, "step": self.step,
                "index": self.index, "rank": self.rank, "node": self.node}  # fmt: skip


def verdict_of(record: Mapping[str, object]) -> Verdict | None:
    """A record of endings.jsonl back as a Verdict (None: not one)."""
    kind, evidence = record.get("kind"), record.get("evidence")
    if not isinstance(kind, str) or not isinstance(evidence, str):
        return None
    step, index, rank, node = (record.get(k) for k in ("step", "index", "rank", "node"))
    return Verdict(kind, evidence, step if isinstance(step, int) else None,
                   index if isinstance(index, int) else None,
                   rank if isinstance(rank, int) else None,
                   node if isinstance(node, str) else None)  # fmt: skip


def attempt_part(log: str, start_mark: str) -> str:
    """The lines of the newest attempt: after the last line starting with `start_mark`
    (their `[rank N] ` labels kept: the rank of an evidence line is told)."""
    lines = log.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith(start_mark)]
    return "\n".join(lines[starts[-1] + 1 :] if starts else lines)


def unprefixed(line: str) -> tuple[str, int | None]:
    """The line without the rank prefixes before it, and the global rank the outermost
    of them names (None: none does; torchrun's `[default3]:` is a local rank)."""
    rank = None
    while found := RANK_PREFIX.match(line):
        named = found.group(1) or found.group(2)
        if rank is None and named is not None:
            rank = int(named)
        line = line[found.end() :]
    return line, rank


def _unlabelled(text: str) -> str:
    return "\n".join(unprefixed(line)[0] for line in text.splitlines())


def _short(line: str) -> str:
    line = " ".join(line.split())
    return line if len(line) <= EVIDENCE_CHARS else line[: EVIDENCE_CHARS - 3] + "..."


@dataclass(frozen=True)
class Traceback:
    frames: str  # the indented lines and the wrappers' lines of the block
    exception: str  # its innermost exception line
    notes: str  # the lines after it (an exception's notes)


def tracebacks(text: str) -> list[Traceback]:
    """The Python tracebacks of the text, in order; a chained one (a DataLoader worker's
    `Caught X in DataLoader worker process N` and its original) counts once, by the
    innermost exception."""
    found: list[Traceback] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if "Traceback (most recent call last):" not in lines[i]:
            i += 1
            continue
        frames: list[str] = []
        exception = ""
        i += 1
        while i < len(lines):
            line = lines[i]
            if "Traceback (most recent call last):" in line or not line.strip():
                i += 1
                continue
            if line[0].isspace() or WRAPPER.search(line) or line.startswith("The above"):
                frames.append(line)
                i += 1
                continue
            if EXCEPTION.match(line) and not WRAPPER.search(line):
                exception = line
                i += 1
            break
        notes = []
        while i < len(lines) and lines[i].startswith("jzk: "):
            notes.append(lines[i])
            i += 1
        if exception:
            found.append(Traceback("\n".join(frames), exception, "\n".join(notes)))
    return found


def from_log(text: str) -> Verdict | None:
    """The class the attempt's log shows, or None when it shows none."""
    for kind, pattern in PATTERNS:
        for line in text.splitlines():
            body, rank = unprefixed(line)
            # Not a traceback's source line (`    raise torch.OutOfMemoryError(`).
            if pattern.search(body) and not body[:1].isspace() and not CARRIED_ON.match(body):
                named = NODE_NAME.search(body)
                return Verdict(
                    kind, _short(_with_figure(kind, body)), rank=rank,
                    node=named.group(1) if named else None,
                )  # fmt: skip
    text = _unlabelled(text)
    for tb in tracebacks(text):
        if DATA_FRAMES.search(tb.frames) or INDEX.search(tb.notes):
            match = INDEX.search(tb.notes)
            index = int(match.group(1)) if match else None
            said = f" (dataset index {index})" if index is not None else ""
            return Verdict(DATA_ERROR, _short(tb.exception + said), index=index)
    for tb in tracebacks(text):
        if UNREADABLE.search(tb.exception) and LOAD_FRAMES.search(tb.frames + tb.exception):
            return Verdict(CHECKPOINT_UNREADABLE, _short(tb.exception))
    found = tracebacks(text)
    for tb in found:
        if not PEER_LOST.search(tb.exception):
            return Verdict(USER_ERROR, _short(tb.exception))
    if killed := KILLED.search(text):  # every traceback is a peer's that lost it
        return Verdict(UNKNOWN, killed.group(0))
    for tb in found:
        return Verdict(USER_ERROR, _short(tb.exception))
    return None


def _with_figure(kind: str, line: str) -> str:
    """A CUDA out of memory keeps its figure (what it tried, what the GPU has); the
    watchdog's own line (runtime/heartbeat.py) what it found, without its `jzk train:
    hang:` and the stacks' folder, which made it too long to keep whole."""
    if kind == GPU_OOM and (match := MEMORY.search(line)):
        return f"CUDA out of memory: {match.group(0)}"
    if kind == HANG and (match := WATCHDOG_SAID.search(line)):
        return match.group(1)
    return line


def classify(
    *,
    exit_code: int | None,
    log: str = "",
    signal_name: str | None = None,
    slurm_state: str = "",
    step: int | None = None,
) -> Verdict:
    """One end of an attempt. exit_code: the step's (the toolkit's 3: stopped after a
    save, 4: the watchdog found a hang; None: unknown); log: the attempt's part of the
    log (attempt_part); signal_name: the signal its process died of; slurm_state:
    sacct's State of the job or step ("" when not asked)."""
    state = slurm_state.split()[0] if slurm_state else ""
    seen = from_log(log) if log else None
    if state in SLURM_STATES:
        kind = SLURM_STATES[state]
        said = seen.evidence if seen is not None and seen.kind == kind else f"sacct State={state}"
        return Verdict(kind, said, step)
    if exit_code == 0:
        return Verdict(COMPLETED, "exit 0", step)
    if exit_code == 4 and (seen is None or seen.kind not in NODE_FAULTS):
        # The watchdog's own end: the ranks it stopped print what they were doing.
        return Verdict(HANG, "exit 4: the watchdog found a rank stuck", step)
    if signal_name == "SIGKILL" and seen is not None and seen.kind == USER_ERROR:
        # Killed from outside: the tracebacks are its peers', who lost it.
        return Verdict(UNKNOWN, f"killed by {signal_name}", step)
    if seen is not None and (exit_code != 3 or seen.kind in NODE_FAULTS):
        return Verdict(seen.kind, seen.evidence, step, seen.index, seen.rank, seen.node)
    if exit_code == 3 and signal_name:
        # A script of the user's that died of the stop signal passed on to it: no save
        # on the signal; it goes on from its own newest checkpoint (node/script_task.py).
        said = f"exit 3: stopped by {signal_name}, which the script does not handle: no save"
        return Verdict(STOPPED, said, step)
    if exit_code == 3:
        # Not "after a save": a session loop may stop without one (the rehearsal's advice
        # names that), and its newest checkpoint is then an older one.
        said = "exit 3: stopped on a signal or a request; it goes on from its newest checkpoint"
        return Verdict(STOPPED, said, step)
    if exit_code == 4:
        return Verdict(HANG, "exit 4: the watchdog found a rank stuck", step)
    if signal_name:
        return Verdict(UNKNOWN, f"killed by {signal_name}", step)
    if exit_code is not None and (name := signal_of_exit(exit_code)):
        return Verdict(UNKNOWN, f"exit {exit_code}: killed by {name}", step)
    return Verdict(UNKNOWN, f"exit {exit_code}" if exit_code is not None else "no evidence", step)


@dataclass(frozen=True)
class Decision:
    retry: bool
    why: str  # why not, in words ("" when retried)


def decide(
    now: Verdict, previous: Verdict | None, *, new_checkpoint: bool, restarted_before: bool
) -> Decision:
    """Whether a restart can help after `now`. previous: the end of the attempt before
    (None: this is the first since the run last finished); new_checkpoint: a checkpoint
    was completed since the last restart; restarted_before: this attempt was a restart."""
    if now.kind in ENDS_AT_ONCE:
        return Decision(False, f"{now.words} repeats from the same checkpoint")
    if now.kind == UNKNOWN:
        # No evidence that it would repeat (a step killed without a word):
        # preemption.max_restarts alone bounds it, as before.
        return Decision(True, "")
    # A hang or a node's fault repeats only where the step is known (a script tells none).
    known = now.step is not None or now.kind not in WORTH_A_RETRY
    if previous is not None and known and now.same_failure(previous):
        return Decision(False, "the attempt before failed the same way at the same step")
    if now.kind in WORTH_A_RETRY:
        return Decision(True, "")
    if restarted_before and not new_checkpoint:
        return Decision(False, "no new checkpoint since the last restart")
    return Decision(True, "")


def storm(endings: Sequence[Mapping[str, object]], restarts: int, threshold: int = 3) -> bool:
    """A restart storm: `threshold` restarts or more whose attempts completed no new
    checkpoint (each ending records the newest complete checkpoint it left)."""
    if restarts < threshold:
        return False
    marks = [e.get("checkpoint") for e in endings[-(threshold + 1) :]]
    return len(marks) > threshold and len(set(map(str, marks))) == 1


def node_of_rank(rank: int, nodelist: str, tasks_per_node: str) -> str | None:
    """The node Slurm placed task `rank` on (block distribution, srun's default):
    SLURM_JOB_NODELIST and SLURM_TASKS_PER_NODE (`2(x2)`); None when unknown."""
    try:
        nodes, counts = expand_hostlist(nodelist), parse_tasks_per_node(tasks_per_node)
    except (HostlistError, RankEnvError):
        return None
    first = 0
    for node, count in zip(nodes, counts, strict=False):
        if first <= rank < first + count:
            return node
        first += count
    return None


def excluded_nodes(endings: Sequence[Mapping[str, object]]) -> list[str]:
    """Every node an ending put at fault (a node failure, a GPU hardware error): the
    nodes the next attempts leave out, accumulated over the run's attempts."""
    nodes = {str(e["node"]) for e in endings if e.get("kind") in NODE_FAULTS and e.get("node")}
    return sorted(nodes)


# A process that died at exit, after its Python program had ended: faulthandler's report
# of the abort (the toolkit's script tasks run with PYTHONFAULTHANDLER=1) shows no thread
# still in the main program (no `<module>` frame). Seen with torch 2.13 and gloo: a
# worker thread (ProcessGroupGloo::runLoop) drops the last collective's work after the
# program ended; the work's thread-local state holds a Python object, whose decref takes
# the GIL during Py_FinalizeEx, so CPython ends that thread (pthread_exit) through a
# noexcept destructor: std::terminate, "terminate called without an active exception",
# SIGABRT (pytorch/pytorch#190489). destroy_process_group() does not prevent it.
ABORTED = "Fatal Python error: Aborted"
SIGABRT = 6
_IN_PROGRAM = re.compile(r", line \d+ in <module>")


def died_at_exit(code: int | None, stderr_tail: str) -> bool:
    """The command was killed by SIGABRT (code -6, as subprocess says) after its program
    had ended: faulthandler's report, no thread still in the main program, and no
    traceback in the output (an uncaught error ends with exit 1 even without the abort)."""
    if code != -SIGABRT:
        return False
    at = stderr_tail.rfind(ABORTED)
    if at < 0 or "Traceback (most recent call last)" in stderr_tail[:at]:
        return False
    return _IN_PROGRAM.search(stderr_tail, at) is None


@dataclass(frozen=True)
class AtExit:
    """A rank's death at exit that is no failure of the run: what to say, and what it
    ended (stopped: the stop after its signal, run again to go on; else the work)."""

    note: str
    stopped: bool


def forgiven_at_exit(
    rank: int,
    code: int,
    at_exit: bool,
    peers: Mapping[int, tuple[int | None, bool]],
    world_size: int,
    stopped: bool = False,
) -> AtExit | None:
    """Whether a rank's failure is no failure of the run: it died at exit, after its
    program ended (died_at_exit), and either a stop signal had been passed on to it
    (stopped: its program ended, so it handled the signal; gloo's abort at exit turned a
    stop after a save into a crash) or every other rank's command has ended, each with 0
    or likewise at exit. None: it counts as a failure. peers: rank -> (exit code, died at
    exit) of the others' ended commands (a rank still running is absent). Alone
    (world_size 1) nothing says what its program meant to return. Both launchers (the
    local one, node/script_task.py, and a Slurm task's watch) decide by this rule."""
    if code == 0 or not at_exit or world_size < 2:
        return None
    shown = 128 - code if code < 0 else code  # killed by signal N: 128 + N, as shells say
    if stopped:
        return AtExit(f"rank {rank} died at exit after the stop signal (exit {shown})", True)
    others = [r for r in range(world_size) if r != rank]
    if any(r not in peers or not (peers[r][0] == 0 or peers[r][1]) for r in others):
        return None
    return AtExit(f"rank {rank} died at exit after the work was done (exit {shown})", False)


def peers_undecided(
    rank: int, peers: Mapping[int, tuple[int | None, bool]], world_size: int
) -> bool:
    """Whether forgiven_at_exit must wait: some other rank's command is still running and
    none has failed yet (a failed one decides at once)."""
    others = [r for r in range(world_size) if r != rank]
    failed = any(r in peers and not (peers[r][0] == 0 or peers[r][1]) for r in others)
    return not failed and any(r not in peers for r in others)
