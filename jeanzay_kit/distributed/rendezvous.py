"""Where the ranks of a Slurm job step meet: rank 0's TCPStore on the job's port, or on
the next free one of a short list every rank computes. Edge (sockets, torch's store).

Jobs share nodes (one-GPU jobs on Jean Zay), and two Slurm clusters on one machine give
the same job ids: the port `master_port(job_id)` may already be taken on the master node.
Rank 0 then listens on the next port of `candidate_ports` and says so in one line; the
other ranks try the same list and join the store that carries this job's token, so
none of them joins another job's store by mistake. docs/run-directories.md.
"""

from __future__ import annotations

import errno
import time
from datetime import timedelta

import torch.distributed as dist

# candidate_ports lives with master_port (pure): a script task's ranks agree on the same
# list without torch (node/script_port.py).
from jeanzay_kit.distributed.ranks import RankInfo, candidate_ports
from jeanzay_kit.errors import DistSetupError

TOKEN_KEY = "jzk/rendezvous"
_CONNECT_S = 2.0  # a client's try at one port (a refused one fails at once)


def job_token(info: RankInfo) -> str:
    return f"{info.job_id or 'local'}/{info.world_size}"


def _in_use(err: BaseException) -> bool:
    text = str(err).lower()
    return getattr(err, "errno", None) == errno.EADDRINUSE or "address already in use" in text


def rendezvous_store(info: RankInfo, timeout: timedelta) -> dist.Store:
    """The job step's store: served by rank 0, joined by the others."""
    if info.rank == 0:
        return _serve(info, timeout)
    return _join(info, timeout)


def _serve(info: RankInfo, timeout: timedelta) -> dist.Store:
    ports = candidate_ports(info.master_port)
    for port in ports:
        try:
            store = dist.TCPStore(
                info.master_addr, port, None, True, timeout, wait_for_workers=False
            )
        except (RuntimeError, OSError) as err:
            if _in_use(err) and port != ports[-1]:
                continue
            raise DistSetupError(
                f"rank 0 cannot listen on port {port} of {info.master_addr}: {err}. HINT: "
                "set MASTER_PORT to a free port in the job's environment"
            ) from err
        if port != info.master_port:
            print(
                f"jzk: port {info.master_port} is taken on {info.master_addr} (another job "
                f"on this node?): the ranks meet on port {port} instead",
                flush=True,
            )
        store.set(TOKEN_KEY, job_token(info))
        return store
    raise DistSetupError(f"no free port among {ports} on {info.master_addr}")


def _join(info: RankInfo, timeout: timedelta) -> dist.Store:
    """Wait at each candidate port in turn: where nobody listens yet, rank 0 is still
    starting (wait there); where a store without this job's token answers for a couple
    of seconds, it is another job's (go on to the next port)."""
    token = job_token(info).encode()
    deadline = time.monotonic() + timeout.total_seconds()
    ports = candidate_ports(info.master_port)
    index, strangers = 0, 0
    while time.monotonic() < deadline:
        store = _try_connect(info.master_addr, ports[index])
        if store is not None:
            if store.check([TOKEN_KEY]) and store.get(TOKEN_KEY) == token:
                store.set_timeout(timeout)
                return store
            strangers += 1  # rank 0 sets its token right after it listens
            if strangers >= 10 and index + 1 < len(ports):
                index, strangers = index + 1, 0
        time.sleep(0.2)
    raise DistSetupError(
        f"rank {info.rank} found no store of job {info.job_id} on {info.master_addr} "
        f"(ports {ports[: index + 1]}) within {timeout}: rank 0 did not start or cannot be "
        "reached. HINT: its error in the job's log says why"
    )


def _try_connect(host: str, port: int) -> dist.Store | None:
    try:
        return dist.TCPStore(
            host, port, None, False, timedelta(seconds=_CONNECT_S), wait_for_workers=False
        )
    except (RuntimeError, OSError):
        return None  # nobody listens there (yet), or not a store
