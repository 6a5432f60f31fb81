"""What the loop needs besides weights and optimizer state to go on exactly where it
stopped: the step, the position in the data order, the LR schedule, the grad scaler and
the last logged loss. Rank 0 writes it as `trainer.pt` (plain types: weights_only loads it).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass
class TrainerState:
    step: int
    sample_position: int
    scheduler: dict
    scaler: dict | None
    last_loss: float | None
    # A session's (runtime/session.py) own state besides the model and optimizer: the
    # `extra` given to s.checkpointer, as plain types (state_dict()s, numbers, tensors).
    extra: dict | None = None

    def to_payload(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> TrainerState:
        return cls(
            payload["step"],
            payload["sample_position"],
            payload["scheduler"],
            payload["scaler"],
            payload["last_loss"],
            payload.get("extra"),
        )
