"""Default settings of a bench run, importable without torch (the CLI's help text uses them)."""

from __future__ import annotations

__all__ = ["DEFAULT_CHUNKS", "DEFAULT_REPEAT", "DEFAULT_LAYERS", "DEFAULT_WORKERS", "DEFAULT_QUERIES"]

#: Chunks generated (or read) per run.
DEFAULT_CHUNKS = 4
#: Timed rounds per serde; throughputs are medians over them.
DEFAULT_REPEAT = 3
#: Layers per chunk (evenly spaced, first and last included); ``None`` means every layer.
DEFAULT_LAYERS: int | None = 4
#: ``max_workers`` given to every serde that declares it.
DEFAULT_WORKERS = 1
#: Random queries per (layer, KV head) of the attention-fidelity probe.
DEFAULT_QUERIES = 16
