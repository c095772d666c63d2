"""The bench's recommendation under measurement noise, the bandwidth it measures on
``--adapter``, and ``--policy`` (the ``auto`` policy replayed on the measured codecs)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lmserde.bench.breakeven import Tier, parse_bandwidth
from lmserde.bench.policy_replay import describe_replay, replay_policy
from lmserde.bench.quality import QualityMetrics, TensorError
from lmserde.bench.recommend import load_ms_interval, recommend
from lmserde.bench.report import SerdeResult

Bench = Callable[..., tuple[int, str, str]]
BenchJson = Callable[..., dict[str, Any]]

RAW = 1_000_000
#: 1 MB per chunk on a 1 GB/s tier: raw bytes load in 1 ms
TIER = Tier("one", 1.0)


def _error(exact: bool) -> TensorError:
    return TensorError(0.0 if exact else 1e-3, 1.0, 0.0 if exact else 0.1, exact, 0)


def _result(label: str, stored: float, decode_rounds: list[float], *, exact: bool = True,
            tv: float = 0.02, encode_rounds: list[float] | None = None) -> SerdeResult:
    q = QualityMetrics(_error(exact), _error(exact), _error(exact), 0.0, 0.0,
                       0.0 if exact else tv, 0.0, 0.0 if exact else 0.03, 16)
    rounds = sorted(decode_rounds)
    return SerdeResult(label, {"type": label}, lossy=not exact, raw_bytes_per_chunk=RAW,
                       stored_bytes_per_chunk=stored, compression_ratio=RAW / stored,
                       decode_ms_per_chunk=rounds[len(rounds) // 2], quality=q,
                       decode_ms_rounds=list(decode_rounds),
                       encode_ms_rounds=list(encode_rounds or decode_rounds))


def test_load_time_interval_is_transfer_plus_each_rounds_decode() -> None:
    r = _result("x", 500_000, [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7])
    m = load_ms_interval(r, 1e9)
    assert m.median == pytest.approx(0.5 + 0.4)
    assert m.low == pytest.approx(0.5 + 0.1) and m.high == pytest.approx(0.5 + 0.7)
    assert m.samples == 7 and m.coverage >= 0.95 - 1e-9


def test_a_serde_within_noise_of_raw_bytes_is_not_recommended_and_the_text_says_so() -> None:
    # transfer 0.5 ms + decode 0.3..0.7 ms: the interval 0.8..1.2 ms reaches raw's 1 ms
    noisy = _result("noisy", 500_000, [0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7])
    (rec,) = recommend([noisy], [TIER], max_attn_error=0.05)
    assert rec.serde is None and rec.within_noise == ("noisy",)
    assert "within measurement noise of raw bytes: noisy" in rec.text


def test_serdes_within_noise_of_each_other_are_named_and_the_pick_is_stable() -> None:
    # both beat raw (1 ms) beyond noise; their intervals overlap
    lossy = _result("lossy-small", 300_000, [0.3, 0.32, 0.34, 0.36, 0.38, 0.40, 0.42],
                    exact=False)
    lossless = _result("lossless", 400_000, [0.22, 0.24, 0.26, 0.28, 0.30, 0.32, 0.34])
    (rec,) = recommend([lossy, lossless], [TIER], max_attn_error=0.05)
    assert rec.serde == "lossless" and rec.within_noise == ("lossy-small",)
    assert "within measurement noise of lossy-small" in rec.text and "preferred as lossless" in rec.text
    # a rerun that puts the lossy one ahead by its median gives the same answer
    faster = _result("lossy-small", 300_000, [0.2, 0.22, 0.24, 0.26, 0.28, 0.30, 0.32],
                     exact=False)
    (again,) = recommend([faster, lossless], [TIER], max_attn_error=0.05)
    assert again.serde == "lossless" and again.within_noise == ("lossy-small",)


def test_between_two_lossy_serdes_within_noise_the_one_storing_fewer_bytes_is_picked() -> None:
    a = _result("a", 300_000, [0.30, 0.31, 0.32, 0.33, 0.34, 0.35, 0.36], exact=False)
    b = _result("b", 320_000, [0.26, 0.27, 0.28, 0.29, 0.30, 0.31, 0.32], exact=False)
    (rec,) = recommend([b, a], [TIER], max_attn_error=0.05)
    assert rec.serde == "a" and "the one storing the fewest bytes" in rec.text


def test_a_clear_winner_is_recommended_alone() -> None:
    fast = _result("fast", 300_000, [0.10, 0.11, 0.12, 0.13, 0.14, 0.15, 0.16])
    slow = _result("slow", 300_000, [0.40, 0.41, 0.42, 0.43, 0.44, 0.45, 0.46])
    (rec,) = recommend([slow, fast], [TIER], max_attn_error=0.05)
    assert rec.serde == "fast" and rec.within_noise == ()
    assert "within measurement noise" not in rec.text


def test_interleaved_serdes_are_compared_on_their_paired_rounds() -> None:
    """Each serde's own rounds spread over 0.3-0.5 ms (one slow pass hits both), so their
    intervals overlap; paired round by round, ``slower`` is 0.02 ms slower in every pass: not
    within noise, ``faster`` alone (a tie would go to ``slower``, the first label). Pairs whose
    differences change sign are within noise."""
    from lmserde.bench.recommend import paired_load_difference

    base = [0.30, 0.31, 0.50, 0.32, 0.30, 0.31, 0.33]
    faster = _result("faster", 300_000, base, exact=False)
    slower = _result("b-slower", 300_000, [x + 0.02 for x in base], exact=False)
    for r in (faster, slower):
        r.codec_interleaved = True
    diff = paired_load_difference(slower, faster, TIER.bytes_per_second)
    assert diff is not None and diff.low == pytest.approx(0.02) == pytest.approx(diff.high)
    (rec,) = recommend([faster, slower], [TIER], max_attn_error=0.05)
    assert rec.serde == "faster" and rec.within_noise == ()
    slower.codec_interleaved = False  # not timed together: their intervals' overlap decides
    (rec,) = recommend([faster, slower], [TIER], max_attn_error=0.05)
    assert rec.serde == "b-slower" and rec.within_noise == ("faster",)
    slower.codec_interleaved = True
    slower.decode_ms_rounds = [x + d for x, d in
                               zip(base, [0.02, -0.01, 0.03, -0.02, 0.01, 0.0, 0.02])]
    (rec,) = recommend([faster, slower], [TIER], max_attn_error=0.05)
    assert rec.serde == "b-slower" and rec.within_noise == ("faster",)
    # the text gives the paired difference to the recommended one: faster - slower per pass
    assert "within measurement noise of faster 0.610 ms (0.600-0.800), paired -0.010 ms " \
        "(-0.030 to +0.020) (vs 0.610 ms (0.600-0.830))" in rec.text


@settings(max_examples=60, deadline=None)
@given(jitter=st.lists(st.floats(-0.02, 0.02), min_size=7, max_size=7),
       shift=st.floats(-0.03, 0.03))
def test_noise_inside_the_intervals_never_changes_the_recommended_serde(
        jitter: list[float], shift: float) -> None:
    # two near-equal serdes: whatever small noise a rerun brings, the answer stays the same
    base = [0.30, 0.31, 0.32, 0.33, 0.34, 0.35, 0.36]
    a = _result("a", 300_000, base, exact=False)
    b = _result("b", 310_000, [x + j + shift for x, j in zip(base, jitter)], exact=False)
    (rec,) = recommend([a, b], [TIER], max_attn_error=0.05)
    assert rec.serde == "a"


def test_parse_bandwidth() -> None:
    assert parse_bandwidth("0.1GB/s") == pytest.approx(0.1)
    assert parse_bandwidth(" 100 MB/s ") == pytest.approx(0.1)
    assert parse_bandwidth("3") == 3.0
    assert parse_bandwidth("2GiB/s") == pytest.approx(2**31 / 1e9)
    assert parse_bandwidth("500kB/s") == pytest.approx(5e-4)
    for bad in ("0", "-1", "fast", "1TB/s", "3 GB", "", "0MB/s"):
        with pytest.raises(ValueError, match="positive bandwidth"):
            parse_bandwidth(bad)


def _codecs() -> list[SerdeResult]:
    # per chunk of 1 MB: identity decodes at 10 GB/s, "half" at 2 GB/s storing half, "third"
    # at 0.5 GB/s storing a third
    return [
        _result("identity", RAW, [0.1] * 5, encode_rounds=[0.1] * 5),
        _result("half", RAW / 2, [0.5] * 5, exact=False, tv=0.02, encode_rounds=[0.5] * 5),
        _result("third", RAW / 3, [2.0] * 5, exact=False, tv=0.02, encode_rounds=[2.0] * 5),
    ]


def _replay(gbps: float, **kw: Any) -> Any:
    args = {"max_attn_error": 0.05, "max_output_error": 0.1, "lossless_only": False, **kw}
    return replay_policy(_codecs(), gbps, gbps, source="test", **args)


def test_the_replay_runs_the_policy_and_follows_the_bandwidth() -> None:
    fast = _replay(100.0)
    assert fast.current == "identity"
    assert fast.choices["identity"] > 0.9 * fast.objects
    slow = _replay(0.05)
    assert slow.current == "third"  # the link dominates: the most compression wins
    middle = _replay(1.0)
    # at 1 GB/s: identity 0.1+1+1+0.1, half 0.5+0.5+0.5+0.5, third 2+0.33+0.33+2 (ms)
    assert middle.current == "half"
    assert list(middle.expected_ms_per_chunk) == ["half", "identity", "third"]
    assert middle.expected_ms_per_chunk["half"] == pytest.approx(2.0, rel=1e-6)
    text = "\n".join(describe_replay(middle))
    assert "auto policy at 1 GB/s (test; 200 objects replayed): picks half" in text


def test_the_replay_applies_the_quality_bar() -> None:
    strict = _replay(0.05, max_attn_error=0.01)
    assert strict.current == "identity"
    assert set(strict.refused) == {"half", "third"}
    lossless = _replay(0.05, lossless_only=True)
    assert lossless.current == "identity" and "half" in lossless.refused
    nothing = replay_policy(_codecs()[1:], 0.05, 0.05, source="test", max_attn_error=0.0,
                            max_output_error=0.1, lossless_only=False)
    assert nothing.current is None and "refuses every candidate" in nothing.refused["half"]
    assert "no candidate it may choose" in describe_replay(nothing)[0]


def test_adapter_run_recommends_for_the_bandwidth_it_measured(bench_json: BenchJson) -> None:
    report = bench_json("--serde", "identity", "--adapter", "memory")
    bandwidth = report["adapter_bandwidth"]
    assert bandwidth["adapter"] == "memory"
    assert bandwidth["object_bytes"] == report["source"]["chunk_bytes"]
    for direction in ("store", "load"):
        d = bandwidth[direction]
        lo, hi = d["interval_gbps"]
        assert 0 < lo <= d["gbps"] <= hi and d["samples"] >= 6
    # the measured tier replaces the example ones
    assert [t["name"] for t in report["tiers"]] == ["memory adapter, measured"]
    assert report["tiers"][0]["gbps"] == bandwidth["load"]["gbps"]
    (rec,) = report["recommendations"]
    assert rec["tier"] == "memory adapter, measured"
    assert rec["raw_load_ms"] == pytest.approx(
        report["source"]["chunk_bytes"] / (bandwidth["load"]["gbps"] * 1e9) * 1e3)
    # and the auto policy is replayed at the measured bandwidths
    (replay,) = report["policy"]
    assert replay["source"] == "measured on the memory adapter"
    assert replay["store_gbps"] == bandwidth["store"]["gbps"]
    assert replay["current"] == "identity"


def test_given_tiers_are_added_to_the_measured_one(bench_json: BenchJson) -> None:
    report = bench_json("--serde", "identity", "--adapter", "memory", "--tier", "s3=80MB/s")
    assert [t["name"] for t in report["tiers"]] == ["memory adapter, measured", "s3"]
    assert report["tiers"][1]["gbps"] == pytest.approx(0.08)


def test_without_adapter_the_example_tiers_stay(bench_json: BenchJson) -> None:
    report = bench_json("--serde", "identity")
    assert report["adapter_bandwidth"] is None and report["policy"] == []
    assert [t["name"] for t in report["tiers"]] == ["NVMe", "network storage", "object store"]


def test_policy_option_replays_at_each_given_bandwidth(bench: Bench) -> None:
    code, out, err = bench("--serde", "identity", "--serde", "fp8", "--policy", "0.1GB/s",
                           "--policy", "100GB/s")
    assert code == 0, err
    assert "auto policy at 100 MB/s (given with --policy; 200 objects replayed): picks" in out
    assert "auto policy at 100 GB/s (given with --policy; 200 objects replayed): picks" in out
    assert out.count("expected store + load per chunk: ") == 2


def test_policy_json_and_bad_bandwidths(bench: Bench, bench_json: BenchJson) -> None:
    report = bench_json("--serde", "identity", "--policy", "1GB/s")
    (replay,) = report["policy"]
    assert replay["store_gbps"] == replay["load_gbps"] == 1.0
    assert replay["objects"] == sum(replay["choices"].values())
    assert replay["current"] == "identity"  # the only candidate
    assert set(replay) == {"store_gbps", "load_gbps", "source", "objects", "current", "choices",
                           "explorations", "switches", "expected_ms_per_chunk", "refused"}
    code, out, err = bench("--policy", "fast")
    assert code == 2 and "positive bandwidth" in err and out == ""


def test_a_measurement_that_fails_falls_back_to_the_example_tiers(bench: Bench) -> None:
    import json

    adapter = '{"type": "fault", "inner": {"type": "memory"}, "load_miss_rate": 1.0}'
    _, out, _ = bench("--json", "--serde", "identity", "--adapter", adapter)
    report = json.loads(out)
    assert report["adapter_bandwidth"] is None
    assert any(n.startswith("adapter bandwidth not measured") for n in report["notes"])
    assert [t["name"] for t in report["tiers"]] == ["NVMe", "network storage", "object store"]


def test_plain_output_prints_the_measured_bandwidth_and_the_replay(
        bench: Bench, monkeypatch: pytest.MonkeyPatch) -> None:
    import lmserde.cli.bench_command as command

    monkeypatch.setattr(command, "_has_rich", lambda: False)
    code, out, err = bench("--serde", "identity", "--adapter", "memory", "--policy", "50MB/s")
    assert code == 0, err
    lines = out.splitlines()
    measured = next(line for line in lines if line.startswith("measured on the memory adapter"))
    assert "store " in measured and "load " in measured and "% interval" in measured
    assert "the recommendation uses the measured load bandwidth" in measured
    assert any(line.startswith("  memory adapter, measured (") for line in lines)
    assert any(line.startswith("auto policy at 50 MB/s (given with --policy") for line in lines)
    assert any(line.startswith("auto policy at ") and "(measured on the memory adapter;"
               in line for line in lines)
