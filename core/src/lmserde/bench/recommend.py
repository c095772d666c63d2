"""From measured numbers to advice: which serdes are acceptable, and which to use on each tier.

A serde is *acceptable* when its round trip is bit-exact, or, unless only lossless serdes are
allowed, when it produces no non-finite values, its attention-weight error (mean total variation
distance, see :mod:`lmserde.bench.quality`) is at most ``max_attn_error`` and its attention-output
error (relative RMS) at most ``max_output_error``. On each tier the
acceptable serde with the shortest modelled load time (:func:`~lmserde.bench.breakeven.load_seconds`)
is recommended if it beats loading raw bytes; otherwise the advice is to store raw bytes.
Split-tier serdes (K kept in L1, only V stored) are never recommended: their stored bytes leave
out the half that stays in host memory.

**Measurement noise.** A serde's modelled load time on a tier is one value per timed codec round
(``stored / B`` plus that round's decode time per chunk); its median carries the sign-test
interval of :func:`~lmserde.bench.median_interval.median_interval` (the frame line's). A serde
whose interval reaches raw bytes' load time is *within noise of raw*: raw bytes are recommended
and the text says so. Serdes within noise of the fastest one (the lowest median) are *within noise of each
other*: the text names them all, and the one recommended is chosen by properties a rerun does not
change — lossless before lossy, then the fewest stored bytes, then the label — so two runs on a
quiet machine give the same answer instead of flipping between near-equal serdes.

Whether a serde is within noise of the fastest one: when both were timed interleaved
(``codec_interleaved``, :mod:`lmserde.bench.codec_phase`), on their **paired rounds** — the
median of the per-round differences of their modelled load times (round ``i`` of one minus round
``i`` of the other, over the rounds both timed) and its sign-test interval
(:func:`paired_load_difference`): within noise unless the interval lies wholly above 0 (the
serde is slower than the fastest one in every pair the interval keeps). A slow spell that hits
one pass of the interleaved rounds slows both serdes of a pair alike, so it moves the
differences far less than it moves either serde's own interval. Otherwise (results not timed
together), by overlap: within noise when its interval's low end is at most the fastest one's
high end.
"""

from __future__ import annotations

from collections.abc import Sequence

from lmserde.bench.breakeven import Tier
from lmserde.bench.median_interval import MedianInterval, median_interval
from lmserde.bench.report import Recommendation, SerdeResult

__all__ = ["DEFAULT_MAX_ATTN_ERROR", "DEFAULT_MAX_OUTPUT_ERROR", "is_acceptable", "recommend",
           "format_bandwidth", "load_ms_interval", "paired_load_difference"]

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


def load_ms_interval(result: SerdeResult, bytes_per_second: float) -> MedianInterval:
    """The modelled load time of one chunk of ``result`` on a tier, in ms: one value per timed
    codec round (``stored / B`` plus the round's decode time per chunk), median and interval."""
    transfer_ms = result.stored_bytes_per_chunk / bytes_per_second * 1e3
    rounds = result.decode_ms_rounds or [result.decode_ms_per_chunk]
    return median_interval([transfer_ms + d for d in rounds])


def paired_load_difference(result: SerdeResult, other: SerdeResult,
                           bytes_per_second: float) -> MedianInterval | None:
    """The modelled load time of one chunk of ``result`` minus that of ``other`` on a tier, in
    ms, per paired round (median and interval); ``None`` unless both were timed interleaved
    and have timed rounds."""
    if not (result.codec_interleaved and other.codec_interleaved):
        return None
    pairs = list(zip(result.decode_ms_rounds, other.decode_ms_rounds))  # the rounds both timed
    if not pairs:
        return None
    transfer_ms = (result.stored_bytes_per_chunk - other.stored_bytes_per_chunk) \
        / bytes_per_second * 1e3
    return median_interval([transfer_ms + mine - theirs for mine, theirs in pairs])


def _stable_order(result: SerdeResult) -> tuple[bool, float, str]:
    """The order among serdes within noise of each other: lossless first, then fewer stored
    bytes, then the label (none of which a rerun changes)."""
    return (bool(result.lossy), result.stored_bytes_per_chunk, result.label)


def _ms(m: MedianInterval) -> str:
    return f"{m.median:.3f} ms ({m.low:.3f}-{m.high:.3f})"


def _within_noise(m: MedianInterval, r: SerdeResult, fastest: MedianInterval,
                  leader: SerdeResult, bw: float) -> bool:
    """Whether ``r`` (load time ``m``) is within noise of the fastest serde ``leader`` (load time
    ``fastest``): on paired rounds where they have them, else by overlap."""
    paired = None if r is leader else paired_load_difference(r, leader, bw)
    return m.low <= fastest.high if paired is None else paired.low <= 0.0


def _shown(m: MedianInterval, r: SerdeResult, best: SerdeResult, bw: float) -> str:
    """``r``'s load time, and its paired difference to the recommended ``best`` when it has one."""
    paired = paired_load_difference(r, best, bw)
    if paired is None:
        return f"{r.label} {_ms(m)}"
    return (f"{r.label} {_ms(m)}, paired {paired.median:+.3f} ms "
            f"({paired.low:+.3f} to {paired.high:+.3f})")


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
    return [_recommend_tier(tier, usable, raw) for tier in tiers]


def _recommend_tier(tier: Tier, usable: Sequence[SerdeResult], raw: int) -> Recommendation:
    bw = tier.bytes_per_second
    raw_ms = raw / bw * 1e3
    timed = sorted(((load_ms_interval(r, bw), r) for r in usable),
                   key=lambda pair: (pair[0].median, pair[1].label))
    head = f"{tier.name} ({format_bandwidth(tier.gbps)})"
    wins = [(m, r) for m, r in timed if m.high < raw_ms]  # beats raw beyond noise
    if wins:
        fastest, leader = wins[0]
        ties = [(m, r) for m, r in wins if _within_noise(m, r, fastest, leader, bw)]
        best_ms, best = min(ties, key=lambda pair: _stable_order(pair[1]))
        others = [(m, r) for m, r in ties if r is not best]
        speedup = raw_ms / best_ms.median
        text = (f"{head}: {best.label} — loads a chunk in {best_ms.median:.2f} ms vs "
                f"{raw_ms:.2f} ms raw ({speedup:.1f}x faster), stores "
                f"{best.compression_ratio:.2f}x less; {_quality_phrase(best)}")
        if others:
            text += ("; within measurement noise of "
                     + ", ".join(_shown(m, r, best, bw) for m, r in others)
                     + f" (vs {_ms(best_ms)}): preferred as "
                     + ("lossless" if not best.lossy and any(r.lossy for _, r in others)
                        else "the one storing the fewest bytes"))
        return Recommendation(tier.name, tier.gbps, best.label, best_ms.median, raw_ms, speedup,
                              text, within_noise=tuple(r.label for _, r in others))
    noisy = [(m, r) for m, r in timed if m.low <= raw_ms]
    if noisy:
        why = ("within measurement noise of raw bytes: "
               + ", ".join(f"{r.label} {_ms(m)}" for m, r in noisy)
               + "; raw bytes need no serde")
    else:
        compressing = [(m, r) for m, r in timed if r.compression_ratio > 1.0]
        if compressing:
            m, r = max(compressing, key=lambda pair: pair[1].compression_ratio)
            why = (f"no acceptable serde decodes fast enough to beat raw bytes; {r.label} would "
                   f"store {r.compression_ratio:.2f}x less at {m.median / raw_ms:.1f}x the load "
                   "time")
        elif usable:
            why = "no acceptable serde stores fewer bytes than raw"
        else:
            why = "no serde met the quality bar"
    text = f"{head}: no serde (store raw bytes, {raw_ms:.2f} ms per chunk) — {why}"
    return Recommendation(tier.name, tier.gbps, None, raw_ms, raw_ms, 1.0, text,
                          within_noise=tuple(r.label for _, r in noisy))
