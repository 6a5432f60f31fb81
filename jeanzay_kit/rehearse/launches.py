"""Where a rehearsal's run runs and how a fault reaches its processes.

- `Here` (cluster=local): `jzk train` as a child process; the time-limit warning is
  SIGUSR1 to it, a fault to one training process is os.kill of its pid; a stop is
  started again, as Slurm's requeue would.
- `OnSlurm` (`jzk rehearse --slurm`): `jzk submit`, as its user would; the warning is
  `scancel --signal=USR1` (what Slurm's `--signal` sends), a fault to one training
  process is `kill` run on that process's node by `srun --overlap` into the job, the
  job requeues itself after a stop; a node lost is every training process of one node
  killed at once. A job that ended (a NaN stops the run) is submitted again.

Both find the training processes by their heartbeat files (rundir/beats.py: rank, host,
pid), which the toolkit's own loop writes.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from jeanzay_kit.ckpt.layout import TMP_PREFIX
from jeanzay_kit.distributed.script_env import REHEARSAL_ENV
from jeanzay_kit.errors import JzkError
from jeanzay_kit.rehearse.report_rules import Where, job_waiting
from jeanzay_kit.rundir.beats import Beat
from jeanzay_kit.rundir.run_directory import RunDir

# A save being written is looked for this often (a small model's save lasts tens of ms).
SAVE_POLL_S = 0.002
# How long the watcher on a node waits for a save (within a Slurm command's timeout).
WATCH_S = 50


@dataclass
class Here:
    argv: list[str]
    log: Path
    rehearsal: bool = True  # the NaN fault's file is looked for (REHEARSAL_ENV)
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = dict(os.environ)
        if self.rehearsal:
            env[REHEARSAL_ENV] = "1"
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                self.argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env
            )

    def ended(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def stop(self) -> None:
        """End the run and its ranks (its own session: start_new_session), when the
        rehearsal ends before it: nothing of it goes on training unwatched."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def waiting(self) -> Where:
        """Where the run is, when it has made no step for a while."""
        pid = None if self.proc is None else self.proc.pid
        return Where(f"its process {pid} is alive; its log: {self.log}")

    def warn(self) -> None:
        """The time-limit warning to the run."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGUSR1)

    def signal_ranks(self, beats: Sequence[Beat], signum: int) -> None:
        for beat in beats:
            os.kill(beat.pid, signum)

    def starting_again(self, run: RunDir, tokens: set[str], timeout_s: float) -> None:
        """After a stop: started again, and a second into its start (its handlers may not
        be installed yet: the warning must still be kept)."""
        assert self.proc is not None
        self.proc.wait(timeout=timeout_s)
        self.start()
        time.sleep(1.0)

    def kill_in_save(self, beat: Beat, run: RunDir, timeout_s: float) -> None:
        """SIGKILL to the process while a checkpoint's temporary folder is there."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if any(run.checkpoints.glob(f"{TMP_PREFIX}*")):
                os.kill(beat.pid, signal.SIGKILL)
                return
            if self.ended() is not None:
                raise JzkError(f"the run ended (exit {self.ended()}) before a save to interrupt")
            time.sleep(SAVE_POLL_S)
        raise JzkError(f"no save began within {timeout_s:.0f} s: checkpoint.every_steps?")


@dataclass
class OnSlurm:
    argv: list[str]  # jzk submit ...
    log: Path  # what jzk submit printed
    rehearsal: bool = True
    job: str | None = None

    def start(self) -> None:
        """Submit the job, unless it is still in the queue (requeued after a stop)."""
        from jeanzay_kit.slurm.commands import job_alive

        if self.job is not None and job_alive(self.job):
            return
        env = {**os.environ, **({REHEARSAL_ENV: "1"} if self.rehearsal else {})}
        done = subprocess.run([*self.argv, "--json"], capture_output=True, text=True, env=env)
        with self.log.open("a") as out:
            out.write(done.stdout + done.stderr)
        if done.returncode != 0:
            raise JzkError(f"jzk submit failed (exit {done.returncode}): {done.stderr.strip()}")
        self.job = str(json.loads(done.stdout.strip().splitlines()[-1])["jobs"][0])

    def ended(self) -> int | None:
        """None while the job is pending, running or requeued; else its exit code (0 when
        it completed)."""
        from jeanzay_kit.slurm.commands import job_alive, job_exit_code

        if self.job is None or job_alive(self.job):
            return None
        for _ in range(40):  # the accounting records the end a moment after the queue
            code = job_exit_code(self.job)
            if code is not None:
                return code
            time.sleep(0.25)
        return 1

    def stop(self) -> None:
        """Cancel the job when the rehearsal ends before it (it would hold the nodes)."""
        from jeanzay_kit.slurm.commands import scancel

        if self.job is not None:
            with contextlib.suppress(JzkError):
                scancel([self.job])

    def waiting(self) -> Where:
        """Where the job is, when it has made no step for a while (job_waiting)."""
        from jeanzay_kit.slurm.commands import show_text

        if self.job is None:
            return Where("not submitted yet", queued=True)
        try:
            row = show_text(["squeue", "-h", "-j", self.job, "-o", "%T|%r|%N"])
            shown = show_text(["scontrol", "show", "job", self.job])
        except JzkError as err:
            return Where(f"job {self.job}: {err}")
        where = job_waiting(self.job, row, shown)
        return replace(where, words=f"{where.words}; its log: {self.log}")

    def starting_again(self, run: RunDir, tokens: set[str], timeout_s: float) -> None:
        """After a stop: until the requeued job's processes have begun (a heartbeat of a
        new attempt; a signal to a job with no step running yet reaches nobody)."""
        deadline = time.monotonic() + timeout_s
        while not any(b.token not in tokens for b in run.beats()):
            if time.monotonic() > deadline or self.ended() is not None:
                raise JzkError(f"the job did not start again after a stop: see {self.log}")
            time.sleep(SAVE_POLL_S * 25)

    def warn(self) -> None:
        from jeanzay_kit.slurm.commands import signal_job

        assert self.job is not None
        signal_job(self.job, "USR1")

    def signal_ranks(self, beats: Sequence[Beat], signum: int) -> None:
        """`kill` on each process's node, through a step beside the job's own."""
        from jeanzay_kit.slurm.commands import run_on_node

        assert self.job is not None
        by_host: dict[str, list[str]] = {}
        for beat in beats:
            by_host.setdefault(beat.host, []).append(str(beat.pid))
        name = signal.Signals(signum).name.removeprefix("SIG")
        for host, pids in by_host.items():
            run_on_node(self.job, host, ["kill", f"-{name}", *pids])

    def kill_in_save(self, beat: Beat, run: RunDir, timeout_s: float) -> None:
        """A watcher on the process's node kills it as soon as a checkpoint's temporary
        folder is there (the run directory is on the shared filesystem)."""
        from jeanzay_kit.slurm.commands import run_on_node

        assert self.job is not None
        watch = (
            f"end=$((SECONDS+{int(min(timeout_s, WATCH_S))})); while [ $SECONDS -lt $end ]; "
            f'do for f in "$1"/{TMP_PREFIX}*; do [ -e "$f" ] && exec kill -KILL "$2"; done; '
            "sleep 0.002; done; exit 1"
        )
        argv = ["bash", "-c", watch, "watch", str(run.checkpoints), str(beat.pid)]
        try:
            run_on_node(self.job, beat.host, argv)
        except JzkError as err:
            raise JzkError(f"no save was interrupted on {beat.host}: {err}") from None
