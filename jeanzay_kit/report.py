"""The one way an error reaches a user: `<program>: error: <message>` on stderr.

`jzk <command>` and `jzk train` / `train.py` (with its workers and the Hydra launcher)
print through `error`, so every refusal looks the same, carries its HINT, and never a
traceback.
"""

from __future__ import annotations

import os
import sys


def training_program(argv0: str) -> str:
    """What the training messages call the program: `train.py` when the user ran that
    file of a checkout, else `jzk train` (the console command, its local workers, which
    inherit its argv, and the tasks of a job)."""
    return "train.py" if os.path.basename(argv0) == "train.py" else "jzk train"


def __getattr__(name: str) -> str:
    # report.TRAIN is read when a message is printed: by then the entry point has set
    # sys.argv[0] (train_app.run_app), and spawned workers have inherited it.
    if name == "TRAIN":
        return training_program(sys.argv[0] if sys.argv else "")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def error(program: str, message: object) -> None:
    print(f"{program}: error: {message}", file=sys.stderr, flush=True)
