"""A Slurm command that answers with a fixed text: the runner seam of slurm/commands.py
(CommandRunner), for the logic around squeue's and sacct's answers."""

from __future__ import annotations

import subprocess


class Answers:
    def __init__(self, text: str) -> None:
        self.text, self.argv = text, None

    def run(self, argv, timeout=60.0, cwd=None):
        self.argv = list(argv)
        return subprocess.CompletedProcess(argv, 0, self.text, "")
