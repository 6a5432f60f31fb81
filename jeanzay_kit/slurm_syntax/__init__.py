"""Slurm's own notations as pure functions: time limits (`timefmt`) and hostlists
(`hostlist`). A leaf room: it imports nothing of jeanzay_kit but errors.py, so the config,
the renderer and the rank derivation can all use it without importing each other."""
