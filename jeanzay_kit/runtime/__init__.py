"""The task side's runtime: what every training loop uses once it runs (docs/architecture.md)."""
