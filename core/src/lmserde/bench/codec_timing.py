"""Encode and decode timing of a serde processor alone (no L1, no L2).

Every chunk is its own task, all submitted at once, so a processor with ``max_workers > 1`` runs
them concurrently; one round's time runs from the first submit to the last completion (observed
on the processor's event fd). One warm-up round trip of the first chunk precedes the timed ones.
At least ``repeat`` rounds run; fast serdes run more, until ``min_seconds`` of encoding have been
timed (at most ``max_rounds``), so that their medians are not at the mercy of one noisy round.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from lmserde.base import SerdeProcessor
from lmserde.bench.chunk_objects import (
    ChunkForm,
    allocate_buffer,
    deserialize_items,
    serialize_items,
    serialized_capacity,
)
from lmserde.bench.fd_wait import DEFAULT_TIMEOUT_S, wait_until
from lmserde.keys import ObjectKey
from lmserde.memory import TensorMemoryObj

__all__ = ["CodecTiming", "SerdeTaskError", "measure_codec", "run_tasks", "MIN_TIMED_SECONDS",
           "MAX_ROUNDS"]

#: Encoding time a measurement accumulates before it stops adding rounds.
MIN_TIMED_SECONDS = 0.25
#: Upper bound of rounds (a fast serde on small chunks stops here).
MAX_ROUNDS = 50


class SerdeTaskError(RuntimeError):
    """A serde task failed; the message carries the serde's own error when it is known."""


@dataclass
class CodecTiming:
    """Seconds per repeat for all chunks, and the serialized size of each chunk."""

    encode_seconds: list[float] = field(default_factory=list)
    decode_seconds: list[float] = field(default_factory=list)
    stored_bytes: list[int] = field(default_factory=list)
    capacity_bytes: int = 0


def _failure(processor: SerdeProcessor, direction: str, outcome: Any) -> SerdeTaskError:
    errors = getattr(outcome, "item_errors", ())
    first = next((e for e in errors if e is not None), None)
    serde = getattr(processor, "serde_type", type(processor).__name__)
    detail = f": {type(first).__name__}: {first}" if first is not None else ""
    return SerdeTaskError(f"{serde} {direction} failed{detail}")


def run_tasks(processor: SerdeProcessor, direction: str, srcs: Sequence[Any], dsts: Sequence[Any],
              keys: Sequence[ObjectKey], *, timeout: float = DEFAULT_TIMEOUT_S) -> float:
    """Submit one task per item, wait for all, return the wall time; raise on any failure."""
    if direction == "serialize":
        submit, fd = processor.submit_serialize, processor.get_serialize_event_fd()
        query: Callable[[int], Any] = getattr(processor, "query_serialize_outcome",
                                              processor.query_serialize_result)
    else:
        submit, fd = processor.submit_deserialize, processor.get_deserialize_event_fd()
        query = getattr(processor, "query_deserialize_outcome", processor.query_deserialize_result)
    start = time.perf_counter()
    pending = {submit([s], [d], [k]) for s, d, k in zip(srcs, dsts, keys)}
    failures: list[SerdeTaskError] = []

    def collect() -> bool:
        for task_id in list(pending):
            outcome = query(task_id)
            if outcome is None:
                continue
            pending.discard(task_id)
            if not (outcome is True or getattr(outcome, "ok", False)):
                failures.append(_failure(processor, direction, outcome))
        return not pending

    wait_until(fd, collect, timeout=timeout, what=f"{direction} of {len(srcs)} chunk(s)")
    elapsed = time.perf_counter() - start
    if failures:
        raise failures[0]
    return elapsed


def measure_codec(
    processor: SerdeProcessor,
    form: ChunkForm,
    sources: Sequence[TensorMemoryObj],
    outputs: Sequence[TensorMemoryObj],
    keys: Sequence[ObjectKey],
    repeat: int,
    *,
    on_step: Callable[[], None] | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    min_seconds: float = MIN_TIMED_SECONDS,
    max_rounds: int = MAX_ROUNDS,
) -> CodecTiming:
    """Time rounds of serializing ``sources`` and deserializing into ``outputs`` (see the module
    docstring for how many).

    ``outputs`` (same layout as ``sources``) hold the decoded chunks afterwards. ``on_step`` is
    called after each direction of the first ``repeat`` rounds (for progress bars).
    """
    if not sources or len(sources) != len(outputs) or len(sources) != len(keys):
        raise ValueError("measure_codec needs as many outputs and keys as sources (at least one)")
    capacity = serialized_capacity(processor, sources[0].get_layout(), form)
    buffers = [allocate_buffer(capacity) for _ in sources]
    src_items = serialize_items(processor, sources, form)
    dst_items = deserialize_items(processor, outputs, form)
    # warm-up: lazy initialisation (codebooks, JIT, thread start) is not part of the throughput
    run_tasks(processor, "serialize", src_items[:1], buffers[:1], keys[:1], timeout=timeout)
    run_tasks(processor, "deserialize", buffers[:1], dst_items[:1], keys[:1], timeout=timeout)
    timing = CodecTiming(capacity_bytes=capacity)
    rounds = 0
    while rounds < repeat or (sum(timing.encode_seconds) < min_seconds and rounds < max_rounds):
        for buf in buffers:
            buf.reset_used_size()
        timing.encode_seconds.append(
            run_tasks(processor, "serialize", src_items, buffers, keys, timeout=timeout))
        if on_step and rounds < repeat:
            on_step()
        timing.decode_seconds.append(
            run_tasks(processor, "deserialize", buffers, dst_items, keys, timeout=timeout))
        if on_step and rounds < repeat:
            on_step()
        rounds += 1
    timing.stored_bytes = [buf.get_size() for buf in buffers]
    return timing
