"""jeanzay_kit: from a laptop to a multi-node Slurm GPU cluster, and through preemptions.

The library face: `from jeanzay_kit import session` for a training loop of your own
(docs/your-own-loop.md). Importing the package does not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jeanzay_kit.version import __version__

if TYPE_CHECKING:
    from jeanzay_kit.runtime.session import Session

__all__ = ["session", "__version__"]


def session(steps: int | None = None, run_dir: Any = None, **options: Any) -> Session:
    """The toolkit's runtime for your own loop: `with session(steps=1000) as s:`.

    Ranks, device and process group from the launcher (srun, torchrun, `jzk train`, or
    one process), s.wrap, s.sampler, s.checkpointer, s.should_stop, s.requeue_and_exit,
    s.log. Every option is documented on jeanzay_kit.runtime.session.Session."""
    from jeanzay_kit.runtime.session import Session

    return Session(steps, run_dir, **options)
