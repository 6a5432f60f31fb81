"""Hydra launcher plugin: hydra/launcher=jeanzay (see jeanzay_launcher.py)."""
