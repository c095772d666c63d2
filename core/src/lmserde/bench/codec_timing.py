"""Encode and decode timing of a serde processor alone (no L1, no L2).

Every chunk is its own task, all submitted at once, so a processor with ``max_workers > 1`` runs
them concurrently; one round's time runs from the first submit to the last completion (observed
on the processor's event fd). One warm-up round trip of the first chunk precedes the timed ones.
At least ``repeat`` rounds run; fast serdes run more, until ``min_seconds`` of encoding have been
timed (at most ``max_rounds``), so that their medians are not at the mercy of one noisy round.
:class:`CodecRounds` runs one serde's rounds one at a time, so that a scheduler can interleave
the rounds of several serdes (:mod:`lmserde.bench.codec_phase`).
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

__all__ = ["CodecRounds", "CodecTiming", "SerdeTaskError", "measure_codec", "run_tasks",
           "MIN_TIMED_SECONDS", "MAX_ROUNDS"]

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


class CodecRounds:
    """The timed codec rounds of one serde processor, run one round at a time: by
    :func:`measure_codec` back to back, or interleaved with other serdes' rounds
    (:mod:`lmserde.bench.codec_phase`).

    :meth:`warm_up` runs the untimed round trip of the first chunk; each :meth:`run_round`
    serializes every source into its buffer, then deserializes every buffer into its output,
    and appends both wall times to :attr:`timing`. :attr:`wants_round` applies the round rule of
    the module docstring to this serde's own rounds. ``ValueError`` for mismatched inputs.
    """

    def __init__(
        self, processor: SerdeProcessor, form: ChunkForm, sources: Sequence[TensorMemoryObj],
        outputs: Sequence[TensorMemoryObj], keys: Sequence[ObjectKey], repeat: int, *,
        timeout: float = DEFAULT_TIMEOUT_S, min_seconds: float = MIN_TIMED_SECONDS,
        max_rounds: int = MAX_ROUNDS,
    ) -> None:
        if not sources or len(sources) != len(outputs) or len(sources) != len(keys):
            raise ValueError("codec timing needs as many outputs and keys as sources (at least one)")
        self._processor = processor
        self._keys = list(keys)
        self._repeat, self._timeout = repeat, timeout
        self._min_seconds, self._max_rounds = min_seconds, max_rounds
        capacity = serialized_capacity(processor, sources[0].get_layout(), form)
        self._buffers = [allocate_buffer(capacity) for _ in sources]
        self._src_items = serialize_items(processor, sources, form)
        self._dst_items = deserialize_items(processor, outputs, form)
        self._steps_reported = 0
        #: the rounds timed so far (``stored_bytes`` is filled by :meth:`finish`)
        self.timing = CodecTiming(capacity_bytes=capacity)

    @property
    def counted_steps(self) -> int:
        """Progress steps a measurement reports: one per direction of the first ``repeat``
        rounds."""
        return 2 * self._repeat

    @property
    def steps_left(self) -> int:
        """Of :attr:`counted_steps`, those not reported yet (a serde that fails reports them
        when it stops, so that a phase's steps add up)."""
        return self.counted_steps - self._steps_reported

    @property
    def rounds(self) -> int:
        """Timed rounds so far."""
        return len(self.timing.decode_seconds)

    @property
    def wants_round(self) -> bool:
        """Whether another round is due: fewer than ``repeat``, or fewer than ``max_rounds``
        while less than ``min_seconds`` of encoding has been timed."""
        return self.rounds < self._repeat or (sum(self.timing.encode_seconds) < self._min_seconds
                                              and self.rounds < self._max_rounds)

    def warm_up(self) -> None:
        """One untimed round trip of the first chunk: lazy initialisation (codebooks, JIT,
        thread start) is not part of the throughput."""
        run_tasks(self._processor, "serialize", self._src_items[:1], self._buffers[:1],
                  self._keys[:1], timeout=self._timeout)
        run_tasks(self._processor, "deserialize", self._buffers[:1], self._dst_items[:1],
                  self._keys[:1], timeout=self._timeout)

    def run_round(self, on_step: Callable[[], None] | None = None) -> None:
        """Time one round; ``on_step`` after each direction of the first ``repeat`` rounds.
        Raises what :func:`run_tasks` raises (the round is then not recorded)."""
        counted = self.rounds < self._repeat
        for buf in self._buffers:
            buf.reset_used_size()
        encode = run_tasks(self._processor, "serialize", self._src_items, self._buffers,
                           self._keys, timeout=self._timeout)
        self._step(counted, on_step)
        decode = run_tasks(self._processor, "deserialize", self._buffers, self._dst_items,
                           self._keys, timeout=self._timeout)
        self.timing.encode_seconds.append(encode)
        self.timing.decode_seconds.append(decode)
        self._step(counted, on_step)

    def _step(self, counted: bool, on_step: Callable[[], None] | None) -> None:
        if counted:
            self._steps_reported += 1
            if on_step:
                on_step()

    def finish(self) -> CodecTiming:
        """:attr:`timing` with the serialized size of each chunk of the last round."""
        self.timing.stored_bytes = [buf.get_size() for buf in self._buffers]
        return self.timing


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
    """Time rounds of serializing ``sources`` and deserializing into ``outputs``, one round after
    another (see the module docstring for how many; :class:`CodecRounds`).

    ``outputs`` (same layout as ``sources``) hold the decoded chunks afterwards. ``on_step`` is
    called after each direction of the first ``repeat`` rounds (for progress bars).
    """
    rounds = CodecRounds(processor, form, sources, outputs, keys, repeat, timeout=timeout,
                         min_seconds=min_seconds, max_rounds=max_rounds)
    rounds.warm_up()
    while rounds.wants_round:
        rounds.run_round(on_step)
    return rounds.finish()
