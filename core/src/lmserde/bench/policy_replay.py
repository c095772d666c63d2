"""What the ``auto`` policy would pick at a given bandwidth: the policy itself
(:class:`lmserde.adaptive.AutoPolicy`), replayed on the codec speeds and ratios this bench run
measured.

The candidates are the measured serdes that could be stored whole (not split-tier), each with its
measured quality: lossy unless its round trip was bit-exact, its attention-weight error the
measured ``attn w err``. The run's quality bar applies as in the recommendations: the policy
itself refuses lossy candidates above ``--max-attn-error`` (``max_attention_error``), and those
that miss the bench's other bars (attention-output error, non-finite values, ``--lossless-only``)
are left out beforehand, with the reason. Then ``objects`` objects (default 200) go through the
policy as through the ``auto`` serde: ``decide``, then ``observe_store`` with the candidate's
encode time of one timed round (per chunk, the rounds taken in turn), its stored bytes per chunk
and ``stored / store bandwidth``, then ``observe_load`` likewise. Deterministic: the same numbers
give the same choices.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from lmserde.adaptive import AutoPolicy, Candidate, PolicySettings
from lmserde.bench.adapter_bandwidth import AdapterBandwidth
from lmserde.bench.recommend import format_bandwidth, is_acceptable
from lmserde.bench.report import SerdeResult

__all__ = ["PolicyReplay", "replay_policy", "replay_policies", "policy_bandwidths",
           "describe_replay", "REPLAY_OBJECTS"]

#: Objects a replay decides.
REPLAY_OBJECTS = 200


@dataclass
class PolicyReplay:
    """One replay: the bandwidths it ran at, what the policy ended up choosing, how often it chose
    each candidate, each candidate's expected store + load ms per chunk, and what was refused."""

    store_gbps: float
    load_gbps: float
    source: str
    objects: int
    current: str | None = None
    choices: dict[str, int] = field(default_factory=dict)
    explorations: dict[str, int] = field(default_factory=dict)
    switches: int = 0
    expected_ms_per_chunk: dict[str, float] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)


def _candidate(result: SerdeResult) -> Candidate:
    q = result.quality
    exact = q is not None and q.bit_exact
    return Candidate(result.label, lossy=not exact,
                     attention_error=None if q is None else min(1.0, max(0.0, q.attn_weight_tv)))


def replay_policy(
    results: Sequence[SerdeResult], store_gbps: float, load_gbps: float, *, source: str,
    max_attn_error: float, max_output_error: float, lossless_only: bool,
    objects: int = REPLAY_OBJECTS, settings: PolicySettings | None = None,
) -> PolicyReplay:
    """Replay the ``auto`` policy at ``store_gbps`` / ``load_gbps`` (GB/s) on ``results`` (see
    the module docstring); ``source`` says where the bandwidth came from (shown with it)."""
    replay = PolicyReplay(store_gbps, load_gbps, source, objects)
    measured = [r for r in results if r.ok and not r.split_tier and r.quality is not None
                and r.encode_ms_rounds and r.decode_ms_rounds]
    kept: list[SerdeResult] = []
    for r in measured:
        # the attention-weight bar is the policy's own; the bench's other bars apply here
        if is_acceptable(r, max_attn_error=1.0, lossless_only=lossless_only,
                         max_output_error=max_output_error):
            kept.append(r)
        else:
            replay.refused[r.label] = ("misses the run's quality bar (output error, "
                                       "non-finite values or --lossless-only)")
    if not kept:
        return replay
    bound = replace(settings or PolicySettings(), max_attention_error=max_attn_error)
    try:
        policy = AutoPolicy([_candidate(r) for r in kept], bound, name="bench replay",
                            emit_events=False)
    except ValueError as exc:  # the bound refuses every candidate
        replay.refused.update({r.label: str(exc) for r in kept})
        return replay
    replay.refused.update(policy.refused)
    store_bps, load_bps = store_gbps * 1e9, load_gbps * 1e9
    for k in range(objects):
        i = policy.decide()
        r = kept[i]
        raw, stored = r.raw_bytes_per_chunk, r.stored_bytes_per_chunk
        encode = r.encode_ms_rounds[k % len(r.encode_ms_rounds)] / 1e3
        decode = r.decode_ms_rounds[k % len(r.decode_ms_rounds)] / 1e3
        policy.observe_store(i, raw, round(stored), encode, stored / store_bps)
        policy.observe_load(i, raw, round(stored), decode, stored / load_bps)
    snap = policy.snapshot()
    replay.current = snap["current"]
    replay.choices = {n: c for n, c in snap["choices"].items() if c}
    replay.explorations = {n: c for n, c in snap["explorations"].items() if c}
    replay.switches = snap["switches"]
    raw = kept[0].raw_bytes_per_chunk
    replay.expected_ms_per_chunk = {n: s * 1e3 for n, s in
                                    sorted(policy.expected_seconds(raw).items(),
                                           key=lambda item: item[1])}
    return replay


def policy_bandwidths(given_gbps: Sequence[float], measured: AdapterBandwidth | None,
                      ) -> list[tuple[float, float, str]]:
    """``(store GB/s, load GB/s, source)`` of each replay of a run: every ``--policy``
    bandwidth, then the adapter's measured ones."""
    runs = [(g, g, "given with --policy") for g in given_gbps]
    if measured is not None:
        runs.append((measured.store.median / 1e9, measured.load.median / 1e9,
                     f"measured on the {measured.adapter} adapter"))
    return runs


def replay_policies(results: Sequence[SerdeResult], bandwidths: Sequence[tuple[float, float, str]],
                    *, max_attn_error: float, max_output_error: float,
                    lossless_only: bool) -> list[PolicyReplay]:
    """:func:`replay_policy` at each of ``bandwidths`` (from :func:`policy_bandwidths`)."""
    return [replay_policy(results, store, load, source=source, max_attn_error=max_attn_error,
                          max_output_error=max_output_error, lossless_only=lossless_only)
            for store, load, source in bandwidths]


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}{'es' if noun.endswith('h') else 's'}"


def describe_replay(replay: PolicyReplay) -> list[str]:
    """Lines for the report: what the policy picks at that bandwidth, and why."""
    store, load = format_bandwidth(replay.store_gbps), format_bandwidth(replay.load_gbps)
    where = store if store == load else f"store {store}, load {load}"
    head = f"auto policy at {where} ({replay.source}; {replay.objects} objects replayed)"
    if replay.current is None:
        lines = [f"{head}: no candidate it may choose"]
    else:
        chosen = replay.choices.get(replay.current, 0)
        explored = sum(replay.explorations.values())
        lines = [f"{head}: picks {replay.current} ({chosen} of {replay.objects} objects; "
                 f"{_count(explored, 'exploration')}, {_count(replay.switches, 'switch')})"]
        lines.append("  expected store + load per chunk: " + ", ".join(
            f"{name} {ms:.2f} ms" for name, ms in replay.expected_ms_per_chunk.items()))
    lines += [f"  refused: {name}: {why}" for name, why in replay.refused.items()]
    return lines

