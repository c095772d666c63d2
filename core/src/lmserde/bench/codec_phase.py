"""The codec timing of a run's serdes, interleaved round by round.

First each serde is prepared in turn: its processor is built, its chunk form and slots are
checked and its own warm-up round trip runs (:class:`~lmserde.bench.codec_timing.CodecRounds`).
Then the timed rounds of every prepared serde are interleaved: pass ``r`` runs round ``r`` of each
serde that still wants one (the round rule of :mod:`lmserde.bench.codec_timing`, decided per
serde: fast serdes keep going after slow ones are done), the run's order rotated by one each
pass so that every serde goes first in turn. A slow spell of a shared machine then falls on one round of
every serde instead of on every round of one, and rounds with the same index are *paired*: timed
in the same pass, moments apart. :mod:`lmserde.bench.recommend` compares two serdes on their
paired rounds.

A serde whose preparation or round fails gets status ``error`` (``skipped`` when it cannot run in
this setting) and drops out; the others go on. A serde's processor is closed as soon as it drops
out or has timed its last round, and every processor still open is closed when the phase ends,
whatever ends it. Warnings and log records raised during a serde's steps go to its result
(:mod:`lmserde.bench.diagnostics`). Serdes of one chunk form share the source objects they read
and the objects they decode into (each serde has its own serialized buffers): a run holds one set
of chunk objects per form, not one per serde.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from lmserde.base import SerdeConfig, SerdeProcessor
from lmserde.bench.chunk_objects import ChunkForm, chunk_form, make_object
from lmserde.bench.codec_timing import MAX_ROUNDS, MIN_TIMED_SECONDS, CodecRounds, CodecTiming
from lmserde.bench.data_path import BENCH_MODEL_NAME
from lmserde.bench.diagnostics import capture_diagnostics
from lmserde.bench.fd_wait import DEFAULT_TIMEOUT_S
from lmserde.bench.kv_chunk import KVChunk
from lmserde.bench.progress import Progress
from lmserde.bench.report import STATUS_ERROR, STATUS_SKIPPED, SerdeResult
from lmserde.bench.serde_selection import SerdeConfigValue
from lmserde.keys import ObjectKey
from lmserde.l2.split.placement import (
    StoragePlacementMode,
    derive_storage_placement_mode,
    split_slots,
)
from lmserde.memory import TensorMemoryObj
from lmserde.registry import get_serde_spec

__all__ = ["CodecMeasurement", "codec_phase_steps", "measure_codecs", "serde_stages"]

#: The progress phase of the interleaved codec timing.
CODEC_PHASE_LABEL = "codec timing"


def codec_phase_steps(serdes: int, repeat: int) -> int:
    """Progress steps of :func:`measure_codecs`: per serde, one for its preparation and one per
    direction of its first ``repeat`` rounds (a serde that drops out reports the rest at once)."""
    return serdes * (1 + 2 * repeat)


def serde_stages(config: SerdeConfigValue) -> list[dict[str, Any]]:
    """The stages of a serde config (one, or a chain's)."""
    return list(config) if isinstance(config, list) else [config]


def _build_processor(config: SerdeConfigValue) -> tuple[SerdeProcessor, str]:
    from lmserde.l2 import create_serde_for_config

    configs = [SerdeConfig(s["type"], {k: v for k, v in s.items() if k != "type"})
               for s in serde_stages(config)]
    processor, _serde_type, contract = create_serde_for_config(
        configs if len(configs) > 1 else configs[0])
    return processor, contract.value


def _check_slots(processor: SerdeProcessor, form: ChunkForm, config: SerdeConfigValue) -> str | None:
    """Why the data path cannot store whole chunks with this serde, or ``None``."""
    if form is not ChunkForm.KV_GROUPS:
        return None
    if derive_storage_placement_mode([config]) is StoragePlacementMode.KV_SPLIT_TIER:
        try:
            split_slots(processor, "")
        except ValueError as exc:
            return str(exc)
        return None  # split-tier: the data path keeps K in L1 and stores V
    mapping = processor.input_slot_mapping() or (0, 1)
    if sorted(g for g in mapping if g is not None) != [0, 1]:
        return (f"input slots {tuple(mapping)} do not cover both K and V, and the serde does not "
                "declare split-tier placement (KV_SPLIT_TIER): the whole-chunk data path cannot "
                "run it")
    return None


class CodecMeasurement:
    """One serde in the codec phase: its result (status, error, spec facts, warnings), its
    :attr:`processor` while open, its rounds and, once it timed them all, its :attr:`timing`."""

    def __init__(self, result: SerdeResult, config: SerdeConfigValue) -> None:
        self.result = result
        self.config = config
        self.form: ChunkForm | None = None
        self.rounds: CodecRounds | None = None
        self.timing: CodecTiming | None = None
        self.processor: SerdeProcessor | None = None

    @property
    def measured(self) -> bool:
        """Timed every round and closed its processor without an error: :attr:`timing` and
        :attr:`form` hold its measurement."""
        return self.timing is not None and self.form is not None and self.result.ok

    @property
    def running(self) -> bool:
        """Prepared, not failed, and wanting another round."""
        return (self.rounds is not None and self.timing is None and self.result.ok
                and self.rounds.wants_round)

    def fail(self, exc: Exception) -> None:
        """Status ``error`` with the reason; closes the processor."""
        self.result.status = STATUS_ERROR
        self.result.error = f"{type(exc).__name__}: {exc}"
        self.close()

    def finish(self) -> None:
        """The rounds are done: keep the timing, close the processor."""
        assert self.rounds is not None
        self.timing = self.rounds.finish()
        self.close()

    def close(self) -> None:
        """Close the processor if it is open (an error closing it fails the serde)."""
        processor, self.processor = self.processor, None
        if processor is None:
            return
        try:
            processor.close()
        except Exception as exc:
            if self.result.ok:
                self.fail(exc)


class _Phase:
    def __init__(self, chunks: Sequence[KVChunk], repeat: int, progress: Progress, *,
                 timeout: float, mute_logs: bool, min_seconds: float, max_rounds: int) -> None:
        self.chunks, self.repeat, self.progress = chunks, repeat, progress
        self.timeout, self.mute_logs = timeout, mute_logs
        self.min_seconds, self.max_rounds = min_seconds, max_rounds
        self.keys = [ObjectKey(ObjectKey.IntHash2Bytes(i), BENCH_MODEL_NAME, 0)
                     for i in range(len(chunks))]
        self._objects: dict[ChunkForm, tuple[list[TensorMemoryObj], list[TensorMemoryObj]]] = {}

    def objects(self, form: ChunkForm) -> tuple[list[TensorMemoryObj], list[TensorMemoryObj]]:
        """The sources and the decode targets of ``form``, made once and shared."""
        if form not in self._objects:
            sources = [make_object(c, form) for c in self.chunks]
            outputs = [TensorMemoryObj.allocate(s.get_layout(), zero=True) for s in sources]
            self._objects[form] = (sources, outputs)
        return self._objects[form]

    def step(self, m: CodecMeasurement, action: Callable[[], None]) -> None:
        """Run one of ``m``'s steps with its diagnostics collected; a failure (or a skip) drops
        it out and reports the progress steps of the rounds it will not time."""
        with capture_diagnostics(mute=self.mute_logs, into=m.result.warnings):
            try:
                action()
            except Exception as exc:  # one failing serde never stops the others
                m.fail(exc)
        if not m.result.ok:
            self.progress.advance(m.rounds.steps_left if m.rounds else 2 * self.repeat)

    def prepare(self, m: CodecMeasurement) -> None:
        """Build ``m``'s processor, check it can run here, warm it up."""
        config, result = m.config, m.result
        result.lossy = any(get_serde_spec(s["type"]).lossy for s in serde_stages(config))
        m.processor, result.size_contract = _build_processor(config)
        m.form = chunk_form(m.processor)
        result.chunk_form = m.form.value
        why_not = _check_slots(m.processor, m.form, config)
        if why_not is not None:
            result.status, result.error = STATUS_SKIPPED, why_not
            m.close()
            return
        sources, outputs = self.objects(m.form)
        m.rounds = CodecRounds(m.processor, m.form, sources, outputs, self.keys, self.repeat,
                               timeout=self.timeout, min_seconds=self.min_seconds,
                               max_rounds=self.max_rounds)
        m.rounds.warm_up()

    def timed_round(self, m: CodecMeasurement) -> None:
        assert m.rounds is not None
        m.rounds.run_round(self.progress.advance)
        if not m.rounds.wants_round:
            m.finish()

    def interleave(self, measurements: Sequence[CodecMeasurement]) -> None:
        """Pass after pass, one round of each serde that wants one, in the run's order rotated
        by one each pass (pass ``r`` starts at serde ``r mod n``, skipping those done)."""
        turn = 0
        while due := [m for m in measurements if m.running]:
            first = turn % len(measurements)
            for m in measurements[first:] + measurements[:first]:
                if m in due:
                    self.step(m, partial(self.timed_round, m))
            turn += 1


def measure_codecs(
    entries: Sequence[tuple[SerdeResult, SerdeConfigValue]], chunks: Sequence[KVChunk],
    repeat: int, progress: Progress, *, timeout: float = DEFAULT_TIMEOUT_S,
    mute_logs: bool = False, min_seconds: float = MIN_TIMED_SECONDS,
    max_rounds: int = MAX_ROUNDS,
) -> list[CodecMeasurement]:
    """Time the codecs of ``entries`` (a result to fill and the completed config, per serde) on
    ``chunks``, interleaved (see the module docstring), as one progress phase of
    :func:`codec_phase_steps` steps. Returns one :class:`CodecMeasurement` per entry, ``measured``
    or with a result that says why not.
    """
    phase = _Phase(chunks, repeat, progress, timeout=timeout, mute_logs=mute_logs,
                   min_seconds=min_seconds, max_rounds=max_rounds)
    measurements = [CodecMeasurement(result, config) for result, config in entries]
    progress.begin(CODEC_PHASE_LABEL, codec_phase_steps(len(entries), repeat))
    try:
        for m in measurements:
            phase.step(m, partial(phase.prepare, m))
            progress.advance()  # the preparation's step
        phase.interleave(measurements)
    finally:
        for m in measurements:
            m.close()
        progress.end()
    return measurements
