"""The ``auto`` policy on simulated tiers: what it ends up choosing, how fast it follows a changed
link, that noise does not make it flip, exploration, the quality bound, metrics and events."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lmserde.adaptive import AutoPolicy, Candidate, PolicySettings
from lmserde.hooks import flush_events
from lmserde.observability import PolicyChangeEvent
from simulated_tier import CHUNK, DEFAULT_CODECS, FP8, FP8_ZSTD, IDENTITY, SimulatedTier, TrueCodec

IDENTITY_I, FP8_I, ZSTD_I = 0, 1, 2
DEFAULTS = PolicySettings()
#: The documented switch bound (docs/adaptive.md): ``window + confirm`` objects.
SWITCH_BOUND = DEFAULTS.window + DEFAULTS.confirm


def _share(choices: list[int], index: int) -> float:
    return choices.count(index) / len(choices)


def test_a_fast_tier_ends_up_storing_raw() -> None:
    tier = SimulatedTier(gbps=10.0, noise=0.2)
    chosen = tier.run(400)
    assert tier.policy.current == IDENTITY_I
    # warm-up turns and explorations (1 in 32) are the only other choices
    assert _share(chosen[50:], IDENTITY_I) >= 1 - 1.5 / DEFAULTS.explore_every
    assert tier.policy.snapshot()["switches"] == 0


def test_a_100_mb_per_second_tier_ends_up_compressing() -> None:
    tier = SimulatedTier(gbps=0.1, noise=0.2)
    chosen = tier.run(400)
    assert tier.policy.current == ZSTD_I  # the highest ratio wins when the link dominates
    assert _share(chosen[50:], IDENTITY_I) <= 1.5 / DEFAULTS.explore_every
    expected = tier.policy.expected_seconds(CHUNK)
    assert expected["fp8+zstd"] < expected["fp8"] < expected["identity"]


def test_a_throttle_mid_run_switches_within_the_documented_bound_and_back() -> None:
    tier = SimulatedTier(gbps=10.0, noise=0.1)
    tier.run(200)
    assert tier.policy.current == IDENTITY_I
    tier.store_gbps = tier.load_gbps = 0.1  # throttled to ~100 MB/s
    after = tier.run(SWITCH_BOUND + 20)
    switched_at = next(k for k in range(len(after)) if tier.policy.current != IDENTITY_I
                       and all(c != IDENTITY_I for c in after[k:k + 3]))
    assert switched_at <= SWITCH_BOUND
    assert switched_at <= 5  # a slowdown shows at once in the sum of seconds (docs/adaptive.md)
    assert tier.policy.current in (FP8_I, ZSTD_I)
    tier.store_gbps = tier.load_gbps = 10.0  # the throttle lifts
    tier.run(SWITCH_BOUND)
    assert tier.policy.current == IDENTITY_I
    assert tier.policy.snapshot()["switches"] >= 2


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), noise=st.floats(0.0, 0.3),
       gbps=st.sampled_from([0.05, 0.1, 10.0, 30.0]))
def test_noise_never_makes_a_clear_choice_flip(seed: int, noise: float, gbps: float) -> None:
    # identity vs fp8+zstd: at these bandwidths one is >= 2x cheaper than the other
    tier = SimulatedTier((IDENTITY, FP8_ZSTD), gbps=gbps, noise=noise, seed=seed)
    tier.run(300)
    snap = tier.policy.snapshot()
    assert snap["switches"] == 0
    assert snap["current"] == ("identity" if gbps >= 10 else "fp8+zstd")


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), noise=st.floats(0.05, 0.3))
def test_near_ties_do_not_flip_flop(seed: int, noise: float) -> None:
    # two candidates whose true expected times are equal: noise alone must not make it alternate
    a = TrueCodec(Candidate("a", lossy=False), 2.0, 2.0, 1.5)
    b = TrueCodec(Candidate("b", lossy=False), 2.0, 2.0, 1.5)
    tier = SimulatedTier((a, b), gbps=1.0, noise=noise, seed=seed)
    tier.run(600)
    assert tier.policy.snapshot()["switches"] <= 1


def test_without_hysteresis_the_same_noise_flips() -> None:
    # the control of the test above: hysteresis is what keeps near ties still
    a = TrueCodec(Candidate("a", lossy=False), 2.0, 2.0, 1.5)
    b = TrueCodec(Candidate("b", lossy=False), 2.0, 2.0, 1.5)
    tier = SimulatedTier((a, b), gbps=1.0, noise=0.3, seed=1,
                         settings=PolicySettings(hysteresis=0.0, confirm=1, window=4))
    tier.run(600)
    assert tier.policy.snapshot()["switches"] > 10


def test_exploration_is_bounded_periodic_and_deterministic() -> None:
    runs = []
    for _ in range(2):
        tier = SimulatedTier(gbps=10.0, settings=PolicySettings(explore_every=20, seed=7))
        runs.append(tier.run(400))
    assert runs[0] == runs[1]  # same seed, same measurements: same choices
    snap = tier.policy.snapshot()
    explored = sum(snap["explorations"].values())
    decided_after_warmup = snap["decisions"] - len(DEFAULT_CODECS)
    assert explored <= decided_after_warmup // 20 + 1
    assert explored >= decided_after_warmup // 20 - 1
    # the least recently tried candidate goes first: both others are explored, in turn
    assert snap["explorations"]["fp8"] >= explored // 2 - 1
    assert snap["explorations"]["fp8+zstd"] >= explored // 2 - 1
    other = SimulatedTier(gbps=10.0, settings=PolicySettings(explore_every=20, seed=8))
    assert other.run(400) != runs[0]  # another seed, another phase


def test_no_exploration_when_disabled() -> None:
    tier = SimulatedTier(gbps=10.0, settings=PolicySettings(explore_every=0))
    chosen = tier.run(300)
    assert set(chosen[len(DEFAULT_CODECS) + 3:]) == {IDENTITY_I}
    assert sum(tier.policy.snapshot()["explorations"].values()) == 0


def test_exploration_notices_a_candidate_that_became_cheaper() -> None:
    # fp8's codec gets 10x faster while identity is the choice: only exploration can see it
    slow_fp8 = TrueCodec(FP8.candidate, 0.3, 0.3, 2.0)
    tier = SimulatedTier((IDENTITY, slow_fp8), gbps=2.0)
    tier.run(100)
    assert tier.policy.current == IDENTITY_I
    tier.codecs = (IDENTITY, TrueCodec(FP8.candidate, 30.0, 30.0, 2.0))
    bound = DEFAULTS.explore_every * (DEFAULTS.window + DEFAULTS.confirm)
    tier.run(bound)
    assert tier.policy.current == FP8_I


def test_read_to_write_ratio_weights_the_load_half() -> None:
    fast_encode = TrueCodec(Candidate("fast-encode", lossy=False), 50.0, 0.5, 2.0)
    fast_decode = TrueCodec(Candidate("fast-decode", lossy=False), 0.5, 50.0, 2.0)
    codecs = (fast_encode, fast_decode)
    write_mostly = SimulatedTier(codecs, settings=PolicySettings(loads_per_store=0.0))
    write_mostly.run(50)
    read_mostly = SimulatedTier(codecs, settings=PolicySettings(loads_per_store=10.0))
    read_mostly.run(50)
    assert write_mostly.policy.current == 0
    assert read_mostly.policy.current == 1


def test_the_quality_bound_refuses_lossy_candidates_at_config_time() -> None:
    bound = PolicySettings(max_attention_error=0.01)
    tier = SimulatedTier(gbps=0.1, settings=bound)  # compression would win on this link
    chosen = tier.run(200)
    assert set(chosen) == {IDENTITY_I}
    snap = tier.policy.snapshot()
    assert set(snap["refused"]) == {"fp8", "fp8+zstd"}
    assert "0.019 is above max_attention_error 0.01" in snap["refused"]["fp8"]
    assert snap["candidates"]["fp8"]["admitted"] is False
    unknown = AutoPolicy([IDENTITY.candidate, Candidate("q", lossy=True)],
                         PolicySettings(max_attention_error=0.05), emit_events=False)
    assert "not known" in unknown.refused["q"]
    with pytest.raises(ValueError, match="refuses every candidate"):
        AutoPolicy([FP8.candidate], bound, emit_events=False)


@pytest.mark.parametrize("bad", [
    {"window": 0}, {"confirm": 0}, {"warmup": 0}, {"explore_every": 1}, {"explore_every": -2},
    {"hysteresis": 1.0}, {"hysteresis": -0.1}, {"loads_per_store": float("inf")},
    {"loads_per_store": -1}, {"seed": 1.5}, {"window": True},
])
def test_invalid_settings_are_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        PolicySettings(**bad)


def test_invalid_candidates_are_refused() -> None:
    with pytest.raises(ValueError, match="at least one candidate"):
        AutoPolicy([], emit_events=False)
    with pytest.raises(ValueError, match="repeated: fp8"):
        AutoPolicy([FP8.candidate, FP8.candidate], emit_events=False)
    with pytest.raises(ValueError, match="fraction"):
        Candidate("x", lossy=True, attention_error=1.5)
    with pytest.raises(ValueError, match="fraction"):
        AutoPolicy([FP8.candidate], PolicySettings(max_attention_error=2.0), emit_events=False)


def test_snapshot_reports_choices_bandwidth_and_estimates() -> None:
    tier = SimulatedTier(gbps=0.5)
    tier.store_gbps, tier.load_gbps = 0.5, 2.0
    chosen = tier.run(100)
    snap = tier.policy.snapshot()
    assert snap["policy"] == "simulated"
    assert snap["decisions"] == 100 == sum(snap["choices"].values())
    assert snap["choices"] == {tier.name(i): n for i, n in Counter(chosen).items()}
    assert snap["store_bytes_per_second"] == pytest.approx(0.5e9)
    assert snap["load_bytes_per_second"] == pytest.approx(2.0e9)
    assert snap["stores_observed"] == snap["loads_observed"] == 100
    fp8 = snap["candidates"]["fp8"]
    assert fp8["compression_ratio"] == pytest.approx(2.0, rel=1e-6)
    assert fp8["encode_bytes_per_second"] == pytest.approx(3e9)
    assert fp8["decode_bytes_per_second"] == pytest.approx(4e9)
    # the documented rule, from the true numbers: 1/enc + (1/r)/store + (1/r)/load + 1/dec
    rule = (1 / 3e9 + 0.5 / 0.5e9 + 0.5 / 2e9 + 1 / 4e9) * 2**30
    assert fp8["expected_seconds_per_gib"] == pytest.approx(rule, rel=1e-6)
    assert snap["current"] == tier.name(tier.policy.current)
    assert snap["settings"]["window"] == DEFAULTS.window


def test_unmeasured_load_side_falls_back_to_the_store_side() -> None:
    policy = AutoPolicy([FP8.candidate], emit_events=False)
    i = policy.decide()
    policy.observe_store(i, CHUNK, CHUNK // 2, CHUNK / 3e9, (CHUNK // 2) / 1e9)
    expected = policy.expected_seconds(CHUNK)["fp8"]
    # load bandwidth = store bandwidth, decode speed = encode speed until a load is seen
    assert expected == pytest.approx(2 * (CHUNK / 3e9 + (CHUNK // 2) / 1e9), rel=1e-6)
    assert policy.snapshot()["load_bytes_per_second"] is None


def test_a_candidate_whose_stores_never_complete_does_not_stall_the_choice() -> None:
    policy = AutoPolicy([IDENTITY.candidate, FP8.candidate], emit_events=False)
    for _ in range(4):  # two rounds of turns; only identity's stores are observed
        i = policy.decide()
        if i == IDENTITY_I:
            policy.observe_store(i, CHUNK, CHUNK, 0.003, 0.01)
    policy.observe_store(IDENTITY_I, CHUNK, CHUNK, 0.003, 0.01)
    assert policy.current == IDENTITY_I


def test_every_change_of_choice_is_an_event(policy_events: list[PolicyChangeEvent]) -> None:
    tier = SimulatedTier(gbps=10.0, emit_events=True)
    tier.run(100)
    tier.store_gbps = tier.load_gbps = 0.1
    tier.run(SWITCH_BOUND + 5)
    assert flush_events()
    events = [e for e in policy_events if e.policy == "simulated"]
    assert [(e.previous, e.reason) for e in events] == [(None, "initial"),
                                                        ("identity", "measured")]
    first, switch = events
    assert first.current == "identity" and switch.current in ("fp8", "fp8+zstd")
    assert switch.expected_seconds_per_gib[switch.current] < switch.expected_seconds_per_gib[
        "identity"]
    assert switch.store_bytes_per_second is not None and switch.store_bytes_per_second < 1e9
    assert len(events) == 1 + tier.policy.snapshot()["switches"]


def test_decide_and_observe_are_thread_safe() -> None:
    policy = AutoPolicy([c.candidate for c in DEFAULT_CODECS], emit_events=False)
    per_thread = 2000
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(per_thread):
                i = policy.decide()
                policy.observe_store(i, CHUNK, CHUNK // (i + 1), 0.004, 0.01)
                policy.observe_load(i, CHUNK, CHUNK // (i + 1), 0.004, 0.01)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors and not any(t.is_alive() for t in threads)
    snap = policy.snapshot()
    assert snap["decisions"] == 4 * per_thread == sum(snap["choices"].values())
    assert snap["stores_observed"] == snap["loads_observed"] == 4 * per_thread


@pytest.mark.parametrize("bad", [(-1, 1, 0.1, 0.1), (1, 1, float("nan"), 0.1),
                                 (1, 1, 0.1, float("inf"))])
def test_a_bad_observation_is_refused_and_records_nothing(bad: tuple[float, ...]) -> None:
    policy = AutoPolicy([FP8.candidate], emit_events=False)
    i = policy.decide()
    for observe in (policy.observe_store, policy.observe_load):
        with pytest.raises(ValueError, match="finite and >= 0"):
            observe(i, *bad)
    snap = policy.snapshot()
    assert snap["stores_observed"] == snap["loads_observed"] == 0
    assert snap["store_bytes_per_second"] is None
