"""From measured numbers to advice: which serdes are acceptable, and which to use on each tier.

A serde is *acceptable* when its round trip is bit-exact, or, unless only lossless serdes are
allowed, when it produces no non-finite values, its attention-weight error (mean total variation
distance, see :mod:`lmserde.bench.quality`) is at most ``max_attn_error`` and its attention-output
error (relative RMS) at most ``max_output_error``. On each tier the
acceptable serde with the shortest modelled load time (:func:`~lmserde.bench.breakeven.load_seconds`)
is recommended if it beats loading raw bytes; otherwise the advice is to store raw bytes.
Split-tier serdes (K kept in L1, only V stored) are never recommended: their stored bytes leave
out the half that stays in host memory.
"""

from __future__ import annotations

from collections.abc import Sequence

from lmserde.bench.breakeven import Tier, load_seconds
from lmserde.bench.report import Recommendation, SerdeResult

__all__ = ["DEFAULT_MAX_ATTN_ERROR", "DEFAULT_MAX_OUTPUT_ERROR", "is_acceptable", "recommend",
           "format_bandwidth"]

#: Default bar on the attention-weight error: at most 5% of the attention mass moves.
DEFAULT_MAX_ATTN_ERROR = 0.05
#: Default bar on the attention-output error (relative RMS): 10%.
DEFAULT_MAX_OUTPUT_ERROR = 0.10


def is_acceptable(result: SerdeResult, *, max_attn_error: float, lossless_only: bool,
                  max_output_error: float = DEFAULT_MAX_OUTPUT_ERROR) -> bool:
    """Whether ``result`` meets the quality bar (see the module docstring)."""
    q = result.quality
    if not result.ok or q is None:
        return False
    if q.bit_exact:
        return True
    if lossless_only:
        return False
    return (q.overall.nonfinite == 0 and q.attn_weight_tv <= max_attn_error
            and q.attn_output_rel_err <= max_output_error)


def format_bandwidth(gbps: float) -> str:
    """``3 GB/s``, ``12.5 GB/s``, ``100 MB/s``, ``9.74 MB/s`` (three significant digits)."""
    if gbps >= 1:
        return f"{gbps:.3g} GB/s"
    return f"{gbps * 1000:.3g} MB/s"


def _quality_phrase(result: SerdeResult) -> str:
    q = result.quality
    assert q is not None
    if q.bit_exact:
        return "lossless"
    return (f"lossy: attention weights {100 * q.attn_weight_tv:.2f}% off, output "
            f"{100 * q.attn_output_rel_err:.2f}%")


def recommend(
    results: Sequence[SerdeResult], tiers: Sequence[Tier], *, max_attn_error: float,
    lossless_only: bool = False, max_output_error: float = DEFAULT_MAX_OUTPUT_ERROR,
) -> list[Recommendation]:
    """One recommendation per tier (see the module docstring)."""
    usable = [r for r in results
              if not r.split_tier  # keeps K in host memory: not a storage-only alternative
              and is_acceptable(r, max_attn_error=max_attn_error, lossless_only=lossless_only,
                               max_output_error=max_output_error)]
    measured = [r for r in results if r.ok and r.raw_bytes_per_chunk]
    if not measured:
        return []
    raw = measured[0].raw_bytes_per_chunk
    out: list[Recommendation] = []
    for tier in tiers:
        bw = tier.bytes_per_second
        raw_s = raw / bw
        timed = sorted(
            ((load_seconds(r.stored_bytes_per_chunk, r.decode_ms_per_chunk / 1e3, bw), r) for r in usable),
            key=lambda pair: pair[0],
        )
        head = f"{tier.name} ({format_bandwidth(tier.gbps)})"
        if timed and timed[0][0] < raw_s:
            best_s, best = timed[0]
            speedup = raw_s / best_s
            text = (f"{head}: {best.label} — loads a chunk in {best_s * 1e3:.2f} ms vs "
                    f"{raw_s * 1e3:.2f} ms raw ({speedup:.1f}x faster), stores "
                    f"{best.compression_ratio:.2f}x less; {_quality_phrase(best)}")
            out.append(Recommendation(tier.name, tier.gbps, best.label, best_s * 1e3, raw_s * 1e3,
                                      speedup, text))
            continue
        compressing = [(t, r) for t, r in timed if r.compression_ratio > 1.0]
        if compressing:
            t, r = max(compressing, key=lambda pair: pair[1].compression_ratio)
            why = (f"no acceptable serde decodes fast enough to beat raw bytes; {r.label} would "
                   f"store {r.compression_ratio:.2f}x less at {t / raw_s:.1f}x the load time")
        elif usable:
            why = "no acceptable serde stores fewer bytes than raw"
        else:
            why = "no serde met the quality bar"
        text = f"{head}: no serde (store raw bytes, {raw_s * 1e3:.2f} ms per chunk) — {why}"
        out.append(Recommendation(tier.name, tier.gbps, None, raw_s * 1e3, raw_s * 1e3, 1.0, text))
    return out
