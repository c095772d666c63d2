"""What the stored-object frame costs on the real data path: framed vs unframed ``identity``.

``identity`` isolates the frame's own work (a header and one checksum pass each way): its store
and load are otherwise plain copies, so any other serde pays the same absolute cost on a
larger total. Framed and unframed rounds alternate, the medians of the per-chunk store + load
latencies are compared.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from lmserde.bench.chunk_objects import ChunkForm
from lmserde.bench.data_path import run_data_path
from lmserde.bench.kv_chunk import KVChunk
from lmserde.l2.serde.stored_frame import FRAME_HEADER_BYTES

__all__ = ["measure_frame_overhead", "describe_frame_overhead"]

_BASELINE = {"type": "identity"}


#: Passes per mode, alternating framed / unframed; each pass runs ``repeat + 1`` rounds.
PASSES = 2


def frame_overhead_steps(repeat: int, chunks: int) -> int:
    """Progress steps :func:`measure_frame_overhead` reports (one per store and per load)."""
    return 2 * PASSES * (repeat + 1) * chunks * 2


def _store_load_ms(adapter_spec: Mapping[str, Any], chunks: Sequence[KVChunk], repeat: int,
                   timeout: float, on_step: Callable[[], None] | None) -> float:
    """Median store + median load of one chunk over ``repeat`` warm rounds (the first of
    ``repeat + 1`` rounds warms the adapter, the buffer pools and the page cache)."""
    path = run_data_path(adapter_spec, _BASELINE, chunks, ChunkForm.SINGLE, repeat + 1,
                         on_step=on_step, timeout=timeout)
    warm = len(chunks)
    return (statistics.median(path.store_seconds[warm:])
            + statistics.median(path.load_seconds[warm:])) * 1e3


def measure_frame_overhead(
    adapter_spec: Mapping[str, Any], chunks: Sequence[KVChunk], repeat: int, *, timeout: float,
    on_step: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Store + load of ``chunks`` through ``identity``, framed and unframed.

    :data:`PASSES` alternating passes per mode, each of ``repeat`` warm rounds. Returns
    ``bytes_per_object``, ``framed_ms`` and ``unframed_ms`` (per chunk: the median pass) and
    ``overhead`` (``framed / unframed - 1``).
    """
    framed: list[float] = []
    unframed: list[float] = []
    for _ in range(PASSES):
        framed.append(_store_load_ms({**adapter_spec, "serde_frame": True}, chunks, repeat,
                                     timeout, on_step))
        unframed.append(_store_load_ms({**adapter_spec, "serde_frame": False}, chunks, repeat,
                                       timeout, on_step))
    f, u = statistics.median(framed), statistics.median(unframed)
    return {"serde": "identity", "bytes_per_object": FRAME_HEADER_BYTES, "framed_ms": f,
            "unframed_ms": u, "overhead": f / u - 1.0 if u > 0 else 0.0}


def describe_frame_overhead(frame: Mapping[str, Any] | None) -> str | None:
    """One line for the report, or ``None`` when it was not measured."""
    if not frame:
        return None
    return (f"stored-object frame: {frame['bytes_per_object']} bytes per object; store + load of "
            f"a chunk through identity {frame['framed_ms']:.2f} ms framed vs "
            f"{frame['unframed_ms']:.2f} ms unframed ({frame['overhead']:+.1%})")
