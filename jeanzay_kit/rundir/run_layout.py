"""The run directory's layout, declared once: every file and folder name, who writes it,
who reads it. Every other module asks here (tests/unit/test_run_layout.py checks that no
other module spells one of these names); docs/architecture.md shows the table. Pure.

A run directory (`job.run_dir`, default outputs/<job.name>-<config hash>) is one
experiment: one writer at a time (the lease), every attempt of it, its checkpoints, its
records. A sweep or log folder (`job.log_dir`, a sweep's directory) holds the manifest.
"""

from __future__ import annotations

from dataclasses import dataclass

# ---- in a run directory -----------------------------------------------------------------
CHECKPOINTS = "checkpoints"  # step-N/ folders (ckpt/layout.py has a checkpoint's own files)
METRICS = "metrics.jsonl"
HEARTBEAT = "heartbeat"  # rank-N.json, one per rank
NCCL_TIMEOUT = "nccl_timeout"  # a collective's timeout, noted per rank
RESULT = "result.json"
MODEL_FINAL = "model_final.pt"
MODEL_DIGEST = "model_final.sha256"
OUTCOME = "outcome.json"
PROVENANCE = "provenance"
LEASE = "lease.json"
RESTARTS = "restarts.json"
ENDINGS = "endings.jsonl"  # how each attempt ended: class, evidence, step, nodes
TRAIN_LOG = "train.log"
TRACKERS = "trackers.json"
TENSORBOARD = "tensorboard"
WANDB = "wandb"
MLFLOW = "mlruns"
STOP_NOTE = ".jzk-signal"
REQUEUE_MARK = ".jzk-requeue"
SCRIPT_PORT = ".jzk-port"  # a script task: the port its ranks meet on, chosen by task 0
WRITE_PROBE = ".jzk-write-test"
# `jzk rehearse`: a NaN for the next step's loss (rank 0 takes and removes it); looked
# for only under a rehearsal (distributed/script_env.py REHEARSAL_ENV).
FAULT_NAN = ".jzk-fault-nan"
SCRIPT_CWD = "cwd"
HANG_PREFIX = "hang-"  # hang-<step>/: the ranks' stacks when the watchdog fired
JOB_SCRIPT = "job.sbatch"
HYDRA = ".hydra"
COMMAND = "command.json"  # a script task: the command that owns the run directory
ATTEMPTS = "attempts.jsonl"  # a script task: one line per start
SUBMITIT = ".submitit"
COMPILE_CACHE = "compile_cache"  # torch.compile's cache folder, kept with the run (CPU)
COMPILE_ARTIFACTS = "compile_cache.bin"  # torch.compile's cache artifacts, one file (CUDA)
STARTS = "starts.jsonl"  # per rank-0 process: its start-up in parts, its end's saving time
MICRO_BATCH = "micro_batch.json"  # train.micro_batch_size=auto: the size the run chose
FAULTS = "faults.json"  # a rehearsal's fault schedule, written before it starts
REHEARSAL = "rehearsal.json"  # a rehearsal's report: each fault, the digest, the goodput
KEPT = "kept"  # checkpoint.dir: the last and best checkpoints copied back (ckpt/kept.py)
ARCHIVED = "archived.json"  # jzk ckpt archive --remove: where the removed checkpoints went
# ---- in a run directory or a sweep's / log folder ---------------------------------------
MANIFEST = "manifest.jsonl"


@dataclass(frozen=True)
class Entry:
    name: str
    kind: str  # "file" | "folder" | "prefix"
    written_by: str
    read_by: str
    what: str


ENTRIES: tuple[Entry, ...] = (
    Entry(CHECKPOINTS, "folder", "ckpt/checkpointer.py (every rank)",
          "ckpt/store.py, ckpt/inspection.py, jzk status, jzk validate",
          "complete checkpoints step-N/ (manifest last), retention"),
    Entry(METRICS, "file", "runtime/metrics.py (rank 0)",
          "jzk status, jzk report, runtime/run_result.py, tune/task.py",
          "one JSON record per logged step"),
    Entry(HEARTBEAT, "folder", "runtime/heartbeat.py (every rank)",
          "runtime/stall.py (watchdog), node/local.py, jzk status",
          "rank-N.json: step, phase, time"),
    Entry(NCCL_TIMEOUT, "folder", "runtime/heartbeat.py", "runtime/stall.py",
          "a rank's collective that timed out"),
    Entry(RESULT, "file", "runtime/run_result.py (rank 0)", "jzk tune, Hydra's sweepers",
          "the run's objective value and direction"),
    Entry(MODEL_FINAL, "file", "train/loop.py, runtime/session.py (rank 0)", "the user",
          "the trained weights"),
    Entry(MODEL_DIGEST, "file", "train/loop.py (rank 0)", "jzk status, tests",
          "sha256 over every parameter of the final model"),
    Entry(OUTCOME, "file", "ending/endings.py (the local launcher)", "jzk status, jzk logs -f",
          "how a local run ended: COMPLETED, STOPPED, FAILED"),
    Entry(PROVENANCE, "folder", "project/provenance.py", "the user",
          "code, config and environment the run was started with"),
    Entry(LEASE, "file", "lease.py (the holder)", "jzk status, jzk cancel, jzk logs -f",
          "who writes the run directory now (one writer)"),
    Entry(RESTARTS, "file", "ending/endings.py", "ending/endings.py",
          "restarts spent after hangs and crashes"),
    Entry(ENDINGS, "file", "ending/endings.py (the launcher, the batch script's step)",
          "jzk status, jzk report, node/restart_job.py, node/local.py",
          "one line per end of an attempt: its class, evidence, step, nodes, checkpoint"),
    Entry(TRAIN_LOG, "file", "runtime/rank_log.py (every rank), node/local.py, the batch script",
          "jzk logs",
          "every rank's output, whole lines labelled [rank N], each start marked"),
    Entry(TRACKERS, "file", "runtime/trackers.py (rank 0)", "runtime/trackers.py",
          "the W&B / MLflow run id and the last step each received"),
    Entry(TENSORBOARD, "folder", "runtime/metrics.py (rank 0)", "tensorboard --logdir",
          "TensorBoard event files (metrics.tensorboard)"),
    Entry(WANDB, "folder", "wandb (rank 0)", "wandb sync", "W&B offline runs (metrics.wandb)"),
    Entry(MLFLOW, "folder", "mlflow (rank 0)", "mlflow ui", "MLflow file store (metrics.mlflow)"),
    Entry(STOP_NOTE, "file", "the batch script (slurm/sbatch.py)", "ending/preemption.py",
          "a signal Slurm sent the batch shell only"),
    Entry(REQUEUE_MARK, "file", "node/script_task.py", "node/script_task.py",
          "a script task asked to be run again"),
    Entry(SCRIPT_PORT, "file", "node/script_port.py (task 0)", "node/script_port.py",
          "the port a script task's ranks meet on (the job's, or a free one when taken)"),
    Entry(WRITE_PROBE, "file", "the batch script, ckpt/writable.py", "-",
          "a probe that the run directory is writable (removed at once)"),
    Entry(FAULT_NAN, "file", "rehearse/runner.py (jzk rehearse)", "runtime/run.py (rank 0)",
          "a rehearsal's NaN for the next step's loss (taken and removed)"),
    Entry(SCRIPT_CWD, "folder", "node/script_cwd.py", "a script task",
          "a script's working directory: links to the project's entries"),
    Entry(HANG_PREFIX, "prefix", "runtime/stall.py, node/script_watch_rules.py", "the user",
          "hang-<step>/: every live rank's stacks when the watchdog fired"),
    Entry(JOB_SCRIPT, "file", "jzk submit", "the user", "the sbatch script submitted"),
    Entry(HYDRA, "folder", "Hydra (jzk train)", "the user", "Hydra's record of the config"),
    Entry(SUBMITIT, "folder", "submitit (a sweep point)", "submitit", "submitit's own files"),
    Entry(COMMAND, "file", "script/script_files.py (a script's first start)",
          "node/script_task.py", "the command a script task's run directory belongs to"),
    Entry(ATTEMPTS, "file", "script/script_files.py", "jzk status, node/script_task.py",
          "a script task's starts"),
    Entry(COMPILE_CACHE, "folder", "torch's Inductor (runtime/compile_cache.py points it here)",
          "torch's Inductor, at every start", "torch.compile's caches on the CPU"),
    Entry(COMPILE_ARTIFACTS, "file", "runtime/compile_cache.py (rank 0)",
          "runtime/compile_cache.py (every rank, at start)",
          "torch.compile's portable cache artifacts, loaded into the node's cache"),
    Entry(STARTS, "file", "runtime/startup.py (rank 0)", "jzk report, jzk status",
          "one line per start: seconds from the process's start to its first step, in "
          "parts; one per end: the saving time after the last metrics record"),
    Entry(MICRO_BATCH, "file", "train/micro_batch.py (rank 0, at the first start)",
          "train/micro_batch.py (every later start)",
          "train.micro_batch_size=auto: the size chosen and why, kept across restarts"),
    Entry(MANIFEST, "file", "launch/manifest.py (jzk submit, the launcher)",
          "jzk status, jzk report, jzk logs, jzk cancel",
          "one record per job: id, run directory, log, overrides (also in sweep folders)"),
    Entry(FAULTS, "file", "rehearse/rehearsal.py (jzk rehearse)", "the user, a replay",
          "a rehearsal's fault schedule, written first: the same seed replays it"),
    Entry(REHEARSAL, "file", "rehearse/rehearsal.py (jzk rehearse)", "the user",
          "a rehearsal's report: each fault, the final digest, steps lost, goodput"),
    Entry(KEPT, "folder", "ckpt/kept.py (rank 0, at each job's end)",
          "ckpt/kept.py (a resume after a purge), jzk ckpt archive",
          "with checkpoint.dir: the newest and best checkpoints, copied from the fast tier"),
    Entry(ARCHIVED, "file", "ckpt/archive.py (jzk ckpt archive --remove)",
          "a start (refused until restored), jzk ckpt list; removed by jzk ckpt restore",
          "the archive the run's removed checkpoints went into, and their steps"),
)  # fmt: skip

NAMES = frozenset(e.name for e in ENTRIES)
# What marks a folder as a run directory: a snapshot leaves such folders out
# (project/snapshot.py); `jzk status` lists a folder holding any of STATUS_MARKS.
RUN_DIR_MARKS = (LEASE, MANIFEST, OUTCOME, METRICS)
STATUS_MARKS = (METRICS, HEARTBEAT, OUTCOME, LEASE)

# What the toolkit itself writes into a script task's run directory (top-level names).
# Anything else was written by the script: its checkpoint, its logs, its outputs.
TOOLKIT_NAMES = frozenset(
    {
        COMMAND,
        ATTEMPTS,
        HYDRA,
        TRAIN_LOG,
        PROVENANCE,
        MANIFEST,
        RESTARTS,
        ENDINGS,
        NCCL_TIMEOUT,
        REQUEUE_MARK,
        SCRIPT_PORT,
        STOP_NOTE,
        HEARTBEAT,
        WRITE_PROBE,
        FAULT_NAN,
        OUTCOME,
        LEASE,
        JOB_SCRIPT,
        SUBMITIT,
    }
)
# A session's hang dumps (hang-<step>/) are the watchdog's, not the script's progress;
# nor are the temporary files of script/script_files.py claim_run_dir and ending/endings.py.
_TOOLKIT_PREFIXES = (HANG_PREFIX, f".{COMMAND}.", f".{OUTCOME}.")


def written_by_script(top: str) -> bool:
    """A top-level name of a run directory that the script wrote, not the toolkit (nor a
    toolkit file being written: durable_io's `.<name>.tmp`)."""
    if top.startswith(".") and top.endswith(".tmp") and top[1:-4] in TOOLKIT_NAMES:
        return False
    return top not in TOOLKIT_NAMES and not top.startswith(_TOOLKIT_PREFIXES)
