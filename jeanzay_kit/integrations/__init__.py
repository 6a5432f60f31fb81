"""Callbacks for training frameworks that run as your own script (job.entry)."""
