"""The ranks of a run on this machine, and the port they meet on. No torch: a script task
(node/script_task.py) starts its processes without importing it (1 s of its time to
first step on a small machine, bench/bench_session.py).
"""

from __future__ import annotations

import random
import socket

from jeanzay_kit.distributed.ranks import RankInfo

# After one worker fails: how long the others get to exit before SIGTERM, then SIGKILL.
GRACE_S = 5.0


# Below Linux's ephemeral range (32768-60999 by default): the kernel never hands these
# out to outgoing connections, which could otherwise take the port in the seconds between
# this choice and rank 0's bind (seen: EADDRINUSE at a local start).
PORT_RANGE = (20000, 32768)


def free_port() -> int:
    """A port free now, outside the ephemeral range (another program could still take
    it before rank 0 binds it, but no outgoing connection will)."""
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(*PORT_RANGE)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def local_rank_infos(world: int, port: int) -> list[RankInfo]:
    return [
        RankInfo(
            rank=r,
            local_rank=r,
            world_size=world,
            local_world_size=world,
            node_rank=0,
            num_nodes=1,
            master_addr="127.0.0.1",
            master_port=port,
            job_id=None,
            launcher="local",
        )
        for r in range(world)
    ]
