"""The port a script task's ranks meet on, checked before the script starts. Edge (binds
sockets, reads and writes one file of the run directory).

A script's `init_process_group` (env://) makes rank 0 listen on MASTER_PORT, the job's
port `master_port(job_id)`. Jobs share nodes, so that port may be taken on the master
node: the script would die of EADDRINUSE, or its other ranks join another job's store.
The toolkit's own loop falls back to the next free port of `candidate_ports`
(distributed/rendezvous.py); a script cannot, so its wrapper does it before the script
starts:

* task 0 tries the candidates on its node (the master node: the first of the step's)
  and writes the port it found free in SCRIPT_PORT, with the step's token
  (job id, step, restart count, JZK_STEP_START), saying in one line when it is not
  the job's own;
* every other task waits for that note (same token) and gives its script that port;
* a MASTER_PORT set in the job's environment is the user's choice: task 0 only checks
  it and names it in one line when it is taken (no note, nobody waits);
* under torchrun (parallel.launcher=torchrun) the agent already listens on the port:
  nothing is checked.

docs/run-directories.md "Two jobs on one node".
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import time
from collections.abc import Mapping
from pathlib import Path

from jeanzay_kit.distributed.ranks import RankInfo, candidate_ports
from jeanzay_kit.errors import JzkError
from jeanzay_kit.rundir.run_directory import RunDir

# How long a task waits for task 0's note: task 0 starts with the others (one srun
# step), but a container or a slow shared filesystem can delay it.
WAIT_S = 300.0
_POLL_S = 0.1


def step_token(env: Mapping[str, str]) -> str:
    """What names this start of the step on every task alike (a requeued job keeps its
    id and restarts its step numbers: the restart count tells the starts apart)."""
    return "/".join(
        env.get(name, "")
        for name in ("SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_RESTART_COUNT", "JZK_STEP_START")
    )


def is_free(port: int) -> bool:
    """Whether a listener could bind `port` on every address of this node now, as torch's
    TCPStore does (SO_REUSEADDR: a port in TIME_WAIT after an earlier attempt is free)."""
    families = [(socket.AF_INET, "0.0.0.0")]
    if socket.has_ipv6:
        families.append((socket.AF_INET6, "::"))
    for family, host in families:
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue  # no IPv6 on this node
        with sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((host, port))
            except OSError as err:
                if family == socket.AF_INET6 and err.errno == errno.EADDRNOTAVAIL:
                    continue
                return False
    return True


def agreed_port(
    env: Mapping[str, str], info: RankInfo, run_dir: RunDir, *, wait_s: float = WAIT_S
) -> int:
    """The port this task's script gets as MASTER_PORT (see the module docstring)."""
    if info.launcher == "torchrun":
        return info.master_port
    by_hand = "MASTER_PORT" in env
    if info.world_size == 1 or by_hand:
        if info.rank == 0 and not is_free(info.master_port):
            where = "MASTER_PORT in the job's environment" if by_hand else "the job's port"
            raise JzkError(
                f"port {info.master_port} ({where}) is taken on {socket.gethostname()}: "
                "the script's rank 0 could not listen on it. HINT: "
                + (
                    "set MASTER_PORT to a free port, or unset it (each job then gets its "
                    "own, with a fallback when taken)"
                    if by_hand
                    else "set MASTER_PORT to a free port in the job's environment"
                )
            )
        return info.master_port
    note = run_dir.script_port
    token = step_token(env)
    if info.rank == 0:
        return _choose(info, note, token)
    return _wait_for(info, note, token, wait_s)


def _choose(info: RankInfo, note: Path, token: str) -> int:
    ports = candidate_ports(info.master_port)
    port = next((p for p in ports if is_free(p)), None)
    if port is None:
        raise JzkError(
            f"ports {', '.join(map(str, ports))} are all taken on {socket.gethostname()}: "
            "the script's ranks have nowhere to meet. HINT: set MASTER_PORT to a free port "
            "in the job's environment"
        )
    if port != info.master_port:
        print(
            f"jzk: port {info.master_port} is taken on {socket.gethostname()} (another job "
            f"on this node?): the script's ranks meet on port {port} instead (MASTER_PORT)",
            flush=True,
        )
    tmp = note.with_name(f".{note.name}.tmp")  # a toolkit file being written (script_rules)
    note.parent.mkdir(parents=True, exist_ok=True)
    tmp.write_text(json.dumps({"token": token, "port": port}))
    os.replace(tmp, note)
    return port


def _wait_for(info: RankInfo, note: Path, token: str, wait_s: float) -> int:
    deadline = time.monotonic() + wait_s
    while True:
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            record = json.loads(note.read_text())
            if record["token"] == token:
                return int(record["port"])
        if time.monotonic() >= deadline:
            raise JzkError(
                f"task {info.rank} waited {wait_s:g} s for task 0 to choose the port in "
                f"{note}: task 0 did not start. HINT: its error in the job's log says why"
            )
        time.sleep(_POLL_S)
