"""jeanzay_kit.integrations.hf.SaveOnStop with the real transformers objects: a signal is
only a flag; the step's end asks the Trainer to save and stop; the end of training exits
3 ("saved: run me again"); without a signal nothing changes."""

from __future__ import annotations

import os
import signal

import pytest

pytest.importorskip("transformers")

from transformers import TrainerControl, TrainerState  # noqa: E402

from jeanzay_kit.integrations.hf import STOP_SIGNALS, SaveOnStop  # noqa: E402


@pytest.fixture
def handlers():
    saved = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


def test_a_signal_saves_at_the_step_end_and_the_end_exits_3(handlers) -> None:
    callback = SaveOnStop()
    state, control = TrainerState(global_step=7), TrainerControl()
    callback.on_step_end(None, state, control)
    assert not (control.should_save or control.should_training_stop)  # no signal yet
    os.kill(os.getpid(), signal.SIGUSR1)  # the process lives on: a flag only
    callback.on_step_end(None, state, control)
    assert control.should_save and control.should_training_stop
    with pytest.raises(SystemExit) as ended:
        callback.on_train_end(None, state, control)
    assert ended.value.code == 3


def test_without_a_signal_the_end_is_the_trainers(handlers) -> None:
    callback = SaveOnStop()
    control = TrainerControl()
    assert callback.on_train_end(None, TrainerState(), control) is control
