"""`jeanzay_kit.slurm.hostlist`, the documented path of the hostlist helpers; they live in
the leaf room jeanzay_kit/slurm_syntax/ (docs/architecture.md)."""

from jeanzay_kit.errors import HostlistError
from jeanzay_kit.slurm_syntax.hostlist import MAX_HOSTS, compress_hostlist, expand_hostlist

__all__ = ["MAX_HOSTS", "HostlistError", "compress_hostlist", "expand_hostlist"]
