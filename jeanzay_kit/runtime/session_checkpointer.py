"""s.checkpointer(...): the toolkit's checkpoints for a loop of your own
(runtime/session.py), over ckpt/checkpointer.py."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from jeanzay_kit.ckpt.trainer_state import TrainerState
from jeanzay_kit.errors import JzkError
from jeanzay_kit.runtime import session_rules as rules
from jeanzay_kit.runtime.run import Run


class SessionCheckpointer:
    """s.checkpointer(...): resume() once before the loop, save(step) at the steps you
    choose (every rank, same step). Saved with the toolkit's Checkpointer: written aside,
    checksummed, renamed, manifest last; the newest complete one is resumed."""

    def __init__(
        self,
        run: Run,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        extra: dict[str, Any] | None,
        config: Mapping[str, Any] | None,
        allow_config_change: bool,
    ) -> None:
        self.run, self.extra = run, extra if extra is not None else {}
        self.user_config, self.allow_config_change = config, allow_config_change
        self.inner = run.open_checkpointer(
            model,
            optimizer,
            world=rules.checkpoint_world(run.mode, run.info.world_size),
            config={},
            options={},
        )
        self.resumed = False

    def _refresh(self) -> None:
        """The layout and config as they are now (s.wrap and s.sampler may come later)."""
        run = self.run
        self.inner.world = rules.checkpoint_world(run.mode, run.info.world_size)
        self.inner.config = rules.resume_config(run.data, self.user_config)

    def resume(self) -> int:
        """Collective: load the newest complete checkpoint of the run directory, if any,
        and return its step (0 on a fresh start). The model, optimizer, every rank's
        random generators and `extra` are restored; s.sampler continues from there."""
        self._refresh()
        state, _ = self.run.resume_from(self.inner, "auto", self.allow_config_change)
        self.resumed = True
        self._restore_extra(state.extra or {})
        return state.step

    def save(self, step: int) -> None:
        """Collective: checkpoint step-`step` (the number of steps done)."""
        self._refresh()
        run = self.run
        run.settle()  # a NaN of the last step is caught before its weights are saved
        run.heartbeat.beat(step, "checkpoint")
        extra = {
            k: v.state_dict() if hasattr(v, "state_dict") else v for k, v in self.extra.items()
        }
        problems = rules.extra_problems(extra, "extra", torch.is_tensor)
        if problems:
            raise JzkError(rules.extra_message(problems))
        trainer = TrainerState(step, run.sample_position(step), {}, None, run.last_loss, extra)
        self.inner.save(step, trainer, force_sync=True)
        run.saved_step = step

    def _restore_extra(self, saved: dict[str, Any]) -> None:
        for key, value in saved.items():
            target = self.extra.get(key)
            if target is not None and hasattr(target, "load_state_dict"):
                target.load_state_dict(value)
            else:
                self.extra[key] = value

    def close(self) -> None:
        self.inner.close()
