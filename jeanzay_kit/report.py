"""The one way an error reaches a user: `<program>: error: <message>` on stderr.

`jzk <command>` and `train.py` (with its workers and the Hydra launcher) print through
`error`, so every refusal looks the same, carries its HINT, and never a traceback.
"""

from __future__ import annotations

import sys

TRAIN = "train.py"


def error(program: str, message: object) -> None:
    print(f"{program}: error: {message}", file=sys.stderr, flush=True)
