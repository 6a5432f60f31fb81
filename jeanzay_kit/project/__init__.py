"""Your project: its root on the import path, its code frozen at submission, its
provenance recorded in every run directory, and the skeleton `jzk init` writes."""
