"""Hugging Face Trainer: save at the stop signal, not at the next `save_steps`.

    from jeanzay_kit.integrations.hf import SaveOnStop
    trainer.add_callback(SaveOnStop())

A Trainer script run by the toolkit (job.entry) is sent SIGUSR1 before the time limit and
SIGTERM at a preemption. Python's default for both is to die at once: the job is requeued
and resumes from the last `save_steps` checkpoint, and every step since is lost. With
this callback a signal only sets a flag (it is installed when the callback is made, in
the script's main thread); at the end of the step every rank learns whether any rank got
one (one all-reduce of one number per step, so all ranks stop at the same step), the
Trainer saves a checkpoint there and stops, and the process exits with 3, the toolkit's
"saved: run me again" (docs/slurm.md, "Your own script"): on Slurm the job is requeued,
and the script's own `get_last_checkpoint(output_dir)` resumes from that step.
"""

from __future__ import annotations

import signal
from typing import Any

import torch
import torch.distributed as dist
from transformers import TrainerCallback

from jeanzay_kit.ending.codes import SLURM_NAMES, Exit, stop_signals

STOP_SIGNALS = stop_signals(SLURM_NAMES)


class SaveOnStop(TrainerCallback):
    """Save a checkpoint and stop at the first step boundary after a stop signal."""

    def __init__(self, signals: tuple[signal.Signals, ...] = STOP_SIGNALS) -> None:
        self.received: int = 0  # the signal's number; 0: none yet
        self.stopped = False
        for signum in signals:
            signal.signal(signum, self._note)

    def _note(self, signum: int, _frame: Any) -> None:
        self.received = self.received or signum  # a flag only: the step ends first

    def _any_rank_received(self) -> bool:
        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
            return bool(self.received)
        on = (
            torch.device("cuda", torch.cuda.current_device())
            if dist.get_backend() == "nccl"
            else "cpu"
        )
        flag = torch.tensor([1 if self.received else 0], device=on)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if self._any_rank_received():
            self.stopped = True
            control.should_save = True
            control.should_training_stop = True
            if state.is_world_process_zero:
                name = signal.Signals(self.received).name if self.received else "another rank"
                print(
                    f"jzk: stop signal ({name}): saving checkpoint-{state.global_step} and "
                    "stopping; the job resumes from it",
                    flush=True,
                )
        return control

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if self.stopped:  # saved, not finished: the script's code after train() must not run
            raise SystemExit(Exit.STOPPED)
        return control
