"""Two jobs on one node: the job's rendezvous port is taken (another job's store holds
it), yet the ranks of this one meet on the next candidate port, all of them, and say so
in one line. Real stores and a real gloo group in two processes."""

from __future__ import annotations

import socket
import subprocess
import sys
from datetime import timedelta

import pytest
import torch.distributed as dist

from jeanzay_kit.distributed.ranks import PORT_BASE, PORT_SPAN
from jeanzay_kit.distributed.rendezvous import candidate_ports

RANK = """
import sys
import torch, torch.distributed as dist
from jeanzay_kit.distributed.process_group import join_group
from jeanzay_kit.distributed.ranks import RankInfo
rank, port = int(sys.argv[1]), int(sys.argv[2])
info = RankInfo(rank=rank, local_rank=rank, world_size=2, local_world_size=2, node_rank=0,
                num_nodes=1, master_addr="127.0.0.1", master_port=port, job_id="4242",
                launcher="srun")
join_group(info, torch.device("cpu"), "gloo", 1.0)
t = torch.tensor([rank + 1.0])
dist.all_reduce(t)
print(f"sum {t.item():.0f}", flush=True)
dist.destroy_process_group()
"""


def test_the_candidates_stay_in_the_job_port_range_and_differ() -> None:
    for port in (PORT_BASE, PORT_BASE + 1, PORT_BASE + PORT_SPAN - 1):
        ports = candidate_ports(port)
        assert ports[0] == port and len(set(ports)) == len(ports)
        assert all(PORT_BASE <= p < PORT_BASE + PORT_SPAN for p in ports)
    assert candidate_ports(40000) == [40000]  # a MASTER_PORT of the user's: only that


def _free_job_port() -> int:
    for port in range(PORT_BASE + 1234, PORT_BASE + PORT_SPAN):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        if all(_free(p) for p in candidate_ports(port)[1:3]):
            return port
    raise AssertionError("no free port")


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


@pytest.mark.timeout(120)
def test_ranks_meet_on_the_next_port_when_another_jobs_store_holds_theirs() -> None:
    port = _free_job_port()
    other = dist.TCPStore(
        "127.0.0.1", port, None, True, timedelta(seconds=30), wait_for_workers=False
    )
    other.set("jzk/rendezvous", "9999/2")  # another job's store, on our port
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RANK, str(r), str(port)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in (1, 0)  # the other rank first: it must not join the stranger
    ]
    outs = [p.communicate(timeout=90)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert all("sum 3" in out for out in outs), outs
    line = f"jzk: port {port} is taken on 127.0.0.1 (another job on this node?)"
    assert line in outs[1] and "Traceback" not in outs[1]
    assert f"on port {candidate_ports(port)[1]} instead" in outs[1]
    del other
