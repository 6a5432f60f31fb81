"""jeanzay_kit: from a laptop to a multi-node Slurm GPU cluster, and through preemptions."""

__version__ = "0.1.0"
