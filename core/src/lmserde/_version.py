"""Package version (kept in step with core/pyproject.toml)."""

__version__ = "0.1.2"
