"""The bench runner: the codec timing of every selected serde (their rounds interleaved,
:mod:`lmserde.bench.codec_phase`), then each one through the real data path and the quality
metrics, then break-even bandwidths and per-tier recommendations."""

from __future__ import annotations

import os
import platform
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from lmserde._version import __version__
from lmserde.bench.adapter_bandwidth import (
    MIN_BANDWIDTH_ROUNDS,
    AdapterBandwidth,
    adapter_bandwidth_steps,
    measure_adapter_bandwidth,
    recommendation_tiers,
)
from lmserde.bench.adapter_choice import DEFAULT_ADAPTER, complete_adapter_spec, validate_adapter_spec
from lmserde.bench.breakeven import GB, Tier, break_even_bandwidth, load_seconds
from lmserde.bench.chunk_objects import ChunkForm
from lmserde.bench.chunk_source import ChunkSource
from lmserde.bench.codec_phase import measure_codecs
from lmserde.bench.codec_timing import CodecTiming
from lmserde.bench.data_path import run_data_path
from lmserde.bench.diagnostics import capture_diagnostics
from lmserde.bench.fd_wait import DEFAULT_TIMEOUT_S
from lmserde.bench.frame_overhead import (
    frame_overhead_steps,
    full_size_chunks,
    measure_frame_overhead,
)
from lmserde.bench.model_shapes import DEFAULT_MODEL, get_model_shape
from lmserde.bench.policy_replay import policy_bandwidths, replay_policies
from lmserde.bench.progress import NullProgress, Progress
from lmserde.bench.quality import ChunkReference, QualityAccumulator
from lmserde.bench.recommend import (
    DEFAULT_MAX_ATTN_ERROR,
    DEFAULT_MAX_OUTPUT_ERROR,
    is_acceptable,
    recommend,
)
from lmserde.bench.report import STATUS_ERROR, BenchReport, SerdeResult
from lmserde.bench.run_defaults import (
    DEFAULT_CHUNKS,
    DEFAULT_LAYERS,
    DEFAULT_QUERIES,
    DEFAULT_REPEAT,
    DEFAULT_WORKERS,
)
from lmserde.bench.serde_selection import (
    BenchInputError,
    BenchSerde,
    RunContext,
    SerdeConfigValue,
    complete_config,
    default_serdes,
    label_for,
    unique_labels,
    validate_serde_config,
)

__all__ = ["BenchOptions", "run_bench"]


_THROWAWAY = "<throwaway key>"
_NOTES_PER_SERDE = 3


@dataclass
class BenchOptions:
    """Everything a run needs. ``serdes=None`` runs every installed serde (:func:`default_serdes`);
    ``layers=None`` uses every layer; ``adapter=None`` uses ``fs`` in a temporary directory.
    ``tiers=None``: the example tiers (:data:`~lmserde.bench.breakeven.DEFAULT_TIERS`) without
    ``adapter``; with one, only the bandwidth measured on it (given ``tiers`` are added to it).
    ``policy_gbps``: bandwidths (GB/s) to replay the ``auto`` policy at (with ``adapter``, it is
    also replayed at the measured ones)."""

    serdes: list[SerdeConfigValue] | None = None
    model: str = DEFAULT_MODEL
    kv_file: str | None = None
    chunks: int = DEFAULT_CHUNKS
    repeat: int = DEFAULT_REPEAT
    workers: int = DEFAULT_WORKERS
    seed: int = 0
    layers: int | None = DEFAULT_LAYERS
    tokens: int | None = None
    adapter: dict[str, Any] | None = None
    tiers: Sequence[Tier] | None = None
    policy_gbps: Sequence[float] = ()
    max_attn_error: float = DEFAULT_MAX_ATTN_ERROR
    max_output_error: float = DEFAULT_MAX_OUTPUT_ERROR
    lossless_only: bool = False
    queries: int = DEFAULT_QUERIES
    timeout: float = DEFAULT_TIMEOUT_S

    def validate(self) -> None:
        """:class:`BenchInputError` for any invalid setting (serde and adapter specs included)."""
        for name in ("chunks", "repeat", "workers", "queries"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise BenchInputError(f"--{name} must be a positive integer, got {value!r}")
        for name in ("layers", "tokens"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise BenchInputError(f"--{name} must be a positive integer, got {value!r}")
        for name in ("max_attn_error", "max_output_error"):
            if not getattr(self, name) >= 0:
                raise BenchInputError(f"--{name.replace('_', '-')} must be >= 0, got "
                                      f"{getattr(self, name)!r}")
        for gbps in self.policy_gbps:
            if isinstance(gbps, bool) or not isinstance(gbps, (int, float)) or not gbps > 0:
                raise BenchInputError(f"--policy needs a positive bandwidth, got {gbps!r}")
        if self.kv_file is None:
            try:
                get_model_shape(self.model)
            except ValueError as exc:
                raise BenchInputError(f"--model: {exc}") from None
        for config in self.serdes or ():
            validate_serde_config(config)
        validate_adapter_spec(self.adapter if self.adapter is not None else DEFAULT_ADAPTER)


def _machine() -> dict[str, Any]:
    return {"cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__, "python": platform.python_version(),
            "platform": platform.platform(terse=True)}


def _public_config(config: SerdeConfigValue, workdir: Path) -> SerdeConfigValue:
    """``config`` as shown to users: a throwaway key path becomes ``<throwaway key>``."""
    def clean(stage: dict[str, Any]) -> dict[str, Any]:
        path = stage.get("master_key_path")
        if isinstance(path, str) and path.startswith(str(workdir)):
            return {**stage, "master_key_path": _THROWAWAY}
        return dict(stage)

    return [clean(s) for s in config] if isinstance(config, list) else clean(config)


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else 0.0


def _measure_all(
    selected: Sequence[BenchSerde], ctx: RunContext, refs: list[ChunkReference],
    opts: BenchOptions, adapter_spec: dict[str, Any], progress: Progress, mute_logs: bool,
) -> list[SerdeResult]:
    """Every selected serde: the codec timing of all of them interleaved
    (:mod:`lmserde.bench.codec_phase`), then each measured one through the data path and the
    quality metrics, one after another."""
    configs = [complete_config(s.config, ctx) for s in selected]
    results = [SerdeResult(s.label, _public_config(c, ctx.workdir))
               for s, c in zip(selected, configs)]
    codecs = measure_codecs(list(zip(results, configs)), [ref.chunk for ref in refs],
                            opts.repeat, progress, timeout=opts.timeout, mute_logs=mute_logs)
    for codec in codecs:
        if codec.measured:
            assert codec.form is not None and codec.timing is not None
            _after_codec(codec.result, codec.config, codec.form, codec.timing, refs, opts,
                         adapter_spec, progress, mute_logs)
    return results


def _after_codec(
    result: SerdeResult, config: SerdeConfigValue, form: ChunkForm, timing: CodecTiming,
    refs: list[ChunkReference], opts: BenchOptions, adapter_spec: dict[str, Any],
    progress: Progress, mute_logs: bool,
) -> None:
    """One timed serde through the data path and the quality metrics into ``result`` (status
    ``error`` with the reason if that fails)."""
    chunks = [ref.chunk for ref in refs]
    progress.begin(result.label, 2 * len(chunks) * opts.repeat + 1)
    with capture_diagnostics(mute=mute_logs, into=result.warnings):
        try:
            path = run_data_path(adapter_spec, config, chunks, form, opts.repeat,
                                 on_step=progress.advance, timeout=opts.timeout)
            quality = QualityAccumulator(seed=opts.seed, queries=opts.queries)
            for ref, (k, v) in zip(refs, path.decoded):
                quality.add(ref, k, v)
            progress.advance()
        except Exception as exc:  # one failing serde never stops the run
            result.status = STATUS_ERROR
            result.error = f"{type(exc).__name__}: {exc}"
            return
        finally:
            progress.end()
    raw = chunks[0].nbytes
    n = len(chunks)
    encode_s, decode_s = _median(timing.encode_seconds), _median(timing.decode_seconds)
    result.codec_interleaved = True
    result.raw_bytes_per_chunk = raw
    result.stored_bytes_per_chunk = sum(path.stored_bytes) / n
    result.placement = path.placement
    result.l1_bytes_per_chunk = sum(path.l1_kept_bytes) / n if path.l1_kept_bytes else 0.0
    result.compression_ratio = raw / result.stored_bytes_per_chunk if result.stored_bytes_per_chunk else 0.0
    result.encode_gbps = n * raw / encode_s / GB if encode_s else 0.0
    result.decode_gbps = n * raw / decode_s / GB if decode_s else 0.0
    result.encode_ms_per_chunk = encode_s / n * 1e3
    result.decode_ms_per_chunk = decode_s / n * 1e3
    result.codec_rounds = len(timing.encode_seconds)
    result.encode_ms_rounds = [s / n * 1e3 for s in timing.encode_seconds]
    result.decode_ms_rounds = [s / n * 1e3 for s in timing.decode_seconds]
    result.store_ms_p50 = _median(path.store_seconds) * 1e3
    result.load_ms_p50 = _median(path.load_seconds) * 1e3
    result.wrapper_stage_ms_p50 = {k: v * 1e3 for k, v in path.stage_p50_seconds.items()}
    result.quality = quality.result()
    result.acceptable = is_acceptable(result, max_attn_error=opts.max_attn_error,
                                      lossless_only=opts.lossless_only,
                                      max_output_error=opts.max_output_error)
    result.break_even_gbps = break_even_bandwidth(
        raw, result.stored_bytes_per_chunk, decode_s / n) / GB


#: Least counted rounds of the frame measurement (framed and unframed paired in each).
FRAME_ROUNDS = 5


def _frame_overhead(
    results: list[SerdeResult], adapter_spec: dict[str, Any], chunks: list[Any],
    full_chunk_bytes: int, opts: BenchOptions, progress: Progress, notes: list[str],
) -> dict[str, Any] | None:
    """The stored-object frame's cost through ``identity`` on full-size chunks of the model (the
    bytes of the bench's chunks repeated), when the run stores frames and measured ``identity``."""
    if adapter_spec.get("serde_frame") is False or not any(
            r.label == "identity" and r.ok for r in results):
        return None
    rounds = max(opts.repeat, FRAME_ROUNDS)
    progress.begin("stored-object frame", frame_overhead_steps(rounds, len(chunks)))
    try:
        full = full_size_chunks([c.fused() for c in chunks], full_chunk_bytes)
        return measure_frame_overhead(adapter_spec, {"type": "identity"}, full, rounds,
                                      timeout=opts.timeout, on_step=progress.advance)
    except Exception as exc:  # informational: never fails the run
        notes.append(f"stored-object frame overhead not measured: {type(exc).__name__}: {exc}")
        return None
    finally:
        progress.end()


def _adapter_bandwidth(
    adapter_spec: dict[str, Any], chunks: list[Any], opts: BenchOptions, progress: Progress,
    notes: list[str],
) -> AdapterBandwidth | None:
    """The bandwidth of the ``--adapter`` the run stores through, measured on raw chunk bytes
    (:mod:`lmserde.bench.adapter_bandwidth`); ``None`` (and a note) when it cannot be measured."""
    rounds = max(opts.repeat, MIN_BANDWIDTH_ROUNDS)
    progress.begin("adapter bandwidth", adapter_bandwidth_steps(rounds, len(chunks)))
    try:
        raw = [c.fused().reshape(-1).view(torch.uint8) for c in chunks]
        return measure_adapter_bandwidth(adapter_spec, raw, rounds, timeout=opts.timeout,
                                         on_step=progress.advance)
    except Exception as exc:  # the run still reports every serde, on the example tiers
        notes.append(f"adapter bandwidth not measured ({type(exc).__name__}: {exc}); "
                     "recommendations use the example tiers")
        return None
    finally:
        progress.end()


def _split_tier_note(result: SerdeResult) -> str:
    mib = 2.0**20
    return (f"{result.label}: split-tier placement — keeps {result.l1_bytes_per_chunk / mib:.2f} "
            f"MiB/chunk of K in L1 (host memory) and stores "
            f"{result.stored_bytes_per_chunk / mib:.2f} MiB/chunk of V in L2; its ratio counts "
            "the L2 bytes only, so it is not among the recommendations")


def run_bench(opts: BenchOptions, progress: Progress | None = None, *,
              mute_logs: bool = False) -> BenchReport:
    """Run the bench; :class:`BenchInputError` for invalid options (nothing has run then).

    Warnings and WARNING+ log records raised while a serde runs go to its ``warnings`` (and the
    report's notes); with ``mute_logs`` they are also kept off the console meanwhile.
    """
    started = time.perf_counter()
    progress = progress or NullProgress()
    opts.validate()
    source = ChunkSource(opts.kv_file, model=opts.model, seed=opts.seed, chunks=opts.chunks,
                         layers=opts.layers, tokens=opts.tokens)
    notes = list(source.notes)
    if opts.serdes is None:
        selected, skipped_notes = default_serdes()
        notes.extend(skipped_notes)
    else:
        selected = [BenchSerde(label_for(c), c) for c in opts.serdes]
    selected = unique_labels(selected)
    chunks = source.chunks
    desc = source.description
    if source.reduced:
        notes.append(
            f"each chunk holds {desc['layers_per_chunk']} of the {source.total_layers} layers "
            f"(layers {', '.join(map(str, desc['layer_ids']))}): bytes and times per chunk scale "
            f"with the layer count (a full chunk is {desc['full_chunk_bytes'] / 2**20:.1f} MiB); "
            "use --layers all for full chunks"
        )
    with tempfile.TemporaryDirectory(prefix="lmserde-bench-") as tmp:
        workdir = Path(tmp)
        adapter_spec = complete_adapter_spec(opts.adapter or DEFAULT_ADAPTER, workdir)
        ctx = RunContext(workdir=workdir, head_dim=chunks[0].head_dim, workers=opts.workers,
                         reduced_layers=source.reduced)
        refs = [ChunkReference(c, seed=opts.seed, queries=opts.queries) for c in chunks]
        results = _measure_all(selected, ctx, refs, opts, adapter_spec, progress, mute_logs)
        frame = _frame_overhead(results, adapter_spec, chunks, desc["full_chunk_bytes"],
                                opts, progress, notes)
        bandwidth = (_adapter_bandwidth(adapter_spec, chunks, opts, progress, notes)
                     if opts.adapter is not None else None)
        notes.extend(ctx.notes)
        notes.extend(_split_tier_note(r) for r in results if r.ok and r.split_tier)
        for r in results:
            notes.extend(f"{r.label}: {w}" for w in r.warnings[:_NOTES_PER_SERDE])
            if len(r.warnings) > _NOTES_PER_SERDE:
                notes.append(f"{r.label}: ... and {len(r.warnings) - _NOTES_PER_SERDE} more "
                             "warnings (see its 'warnings' in --json)")
    shown_adapter = dict(opts.adapter or DEFAULT_ADAPTER)
    if "base_path" in adapter_spec and "base_path" not in shown_adapter:
        shown_adapter["base_path"] = "<temporary directory>"
    settings = {
        "chunks": len(chunks), "repeat": opts.repeat, "workers": opts.workers, "seed": opts.seed,
        "adapter": shown_adapter, "queries_per_head": opts.queries,
        "max_attn_error": opts.max_attn_error, "max_output_error": opts.max_output_error,
        "lossless_only": opts.lossless_only,
    }
    tiers = recommendation_tiers(opts.tiers, bandwidth)
    for r in results:
        if r.ok:
            r.tier_load_ms = {t.name: load_seconds(r.stored_bytes_per_chunk,
                                                   r.decode_ms_per_chunk / 1e3,
                                                   t.bytes_per_second) * 1e3 for t in tiers}
    recommendations = recommend(results, tiers, max_attn_error=opts.max_attn_error,
                                lossless_only=opts.lossless_only,
                                max_output_error=opts.max_output_error)
    return BenchReport(
        lmserde_version=__version__, source=desc, settings=settings, machine=_machine(),
        tiers=[{"name": t.name, "gbps": t.gbps, "description": t.description} for t in tiers],
        results=results, recommendations=recommendations, notes=notes,
        elapsed_seconds=time.perf_counter() - started, frame=frame,
        adapter_bandwidth=None if bandwidth is None else bandwidth.to_json(),
        policy=replay_policies(results, policy_bandwidths(opts.policy_gbps, bandwidth),
                               max_attn_error=opts.max_attn_error,
                               max_output_error=opts.max_output_error,
                               lossless_only=opts.lossless_only),
    )

