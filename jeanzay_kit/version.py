"""The toolkit's version (pyproject.toml says the same); checkpoints and provenance record it."""

__version__ = "0.1.0"
