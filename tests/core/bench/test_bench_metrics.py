"""Quality metrics, break-even bandwidth, the load model and the recommendations."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from lmserde.bench.breakeven import (
    DEFAULT_TIERS,
    Tier,
    break_even_bandwidth,
    load_seconds,
    parse_tier,
)
from lmserde.bench.kv_chunk import KVChunk
from lmserde.bench.kv_generators import SyntheticKVGenerator
from lmserde.bench.model_shapes import get_model_shape
from lmserde.bench.quality import QualityAccumulator, QualityMetrics, TensorError
from lmserde.bench.recommend import format_bandwidth, is_acceptable, recommend
from lmserde.bench.report import SerdeResult


@pytest.fixture(scope="module")
def chunk() -> KVChunk:
    return SyntheticKVGenerator(get_model_shape("tiny"), seed=5).chunk(0)


def _quality(chunk: KVChunk, keys: torch.Tensor, values: torch.Tensor) -> QualityMetrics:
    acc = QualityAccumulator(seed=1, queries=8)
    acc.add(chunk, keys, values)
    return acc.result()


def test_identical_chunk_is_exact_with_zero_errors(chunk: KVChunk) -> None:
    q = _quality(chunk, chunk.keys.clone(), chunk.values.clone())
    assert q.bit_exact and q.keys.bit_exact and q.values.bit_exact
    assert q.overall.rel_mse == 0 and q.overall.max_abs_err == 0 and q.overall.nonfinite == 0
    assert q.overall.cosine == pytest.approx(1.0)
    assert q.attn_logit_rel_err == q.attn_weight_tv == q.attn_output_rel_err == 0.0
    assert q.queries_per_head == 8


@settings(max_examples=25, deadline=None)
@given(scale=st.floats(0.5, 2.0))
def test_scaled_values_have_the_expected_relative_mse_and_full_cosine(scale: float) -> None:
    # float32, so that scaling is exact up to 2^-24 (bf16 rounding would bias the expectation)
    chunk = SyntheticKVGenerator(get_model_shape("tiny"), seed=5, tokens=8, dtype=torch.float32).chunk(0)
    values = chunk.values * scale
    q = _quality(chunk, chunk.keys, values)
    assert q.keys.bit_exact and q.keys.rel_mse == 0
    assert q.values.rel_mse == pytest.approx((scale - 1) ** 2, abs=2e-3)
    assert q.values.cosine == pytest.approx(1.0, abs=1e-3)
    assert q.attn_weight_tv == 0.0  # keys untouched: the same attention weights
    assert q.attn_output_rel_err == pytest.approx(abs(scale - 1), abs=5e-3)


def test_perturbed_keys_move_attention(chunk: KVChunk) -> None:
    g = torch.Generator().manual_seed(0)
    keys = (chunk.keys.float() + 0.5 * torch.randn(chunk.keys.shape, generator=g)).to(chunk.dtype)
    q = _quality(chunk, keys, chunk.values)
    assert not q.bit_exact and q.values.bit_exact
    assert q.attn_logit_rel_err > 0 and q.attn_logit_max_abs_err > 0
    assert 0 < q.attn_weight_tv <= 1 and 0 < q.attn_weight_max_abs_err <= 1
    assert q.attn_output_rel_err > 0
    assert q.keys.max_abs_err > 0.5


def test_non_finite_values_are_counted_not_propagated(chunk: KVChunk) -> None:
    values = chunk.values.clone()
    values[0, 0, 0, :3] = float("nan")
    values[1, 2, 0, 0] = float("inf")
    q = _quality(chunk, chunk.keys, values)
    assert q.values.nonfinite == 4 and q.overall.nonfinite == 4
    assert math.isfinite(q.values.rel_mse) and math.isfinite(q.attn_output_rel_err)


def test_quality_rejects_shape_mismatch_and_empty(chunk: KVChunk) -> None:
    acc = QualityAccumulator()
    with pytest.raises(ValueError, match="no chunk"):
        acc.result()
    with pytest.raises(ValueError, match="differ from the original"):
        acc.add(chunk, chunk.keys[:1], chunk.values[:1])
    with pytest.raises(ValueError, match="queries"):
        QualityAccumulator(queries=0)


def test_break_even_bandwidth() -> None:
    assert break_even_bandwidth(1000, 500, 1e-6) == pytest.approx(5e8)
    assert break_even_bandwidth(1000, 1000, 1e-6) == 0.0  # saves nothing: never wins
    assert break_even_bandwidth(1000, 1029, 1e-6) == 0.0  # larger than raw: never wins
    assert break_even_bandwidth(1000, 500, 0.0) == math.inf
    with pytest.raises(ValueError):
        break_even_bandwidth(-1, 0, 0)
    assert load_seconds(500, 0.25, 1000) == pytest.approx(0.75)
    with pytest.raises(ValueError, match="bandwidth"):
        load_seconds(1, 1, 0)


@given(raw=st.integers(1, 10**9), frac=st.floats(0.01, 0.99), decode=st.floats(1e-7, 10.0),
       factor=st.floats(0.05, 20.0))
def test_the_serde_wins_exactly_below_break_even(raw: int, frac: float, decode: float,
                                                 factor: float) -> None:
    stored = raw * frac
    be = break_even_bandwidth(raw, stored, decode)
    bw = be * factor
    if abs(factor - 1.0) < 1e-6:
        return
    serde_faster = load_seconds(stored, decode, bw) < raw / bw
    assert serde_faster == (factor < 1.0)


def test_parse_tier() -> None:
    assert parse_tier("nvme-gen5=12") == Tier("nvme-gen5", 12.0, "given with --tier")
    assert parse_tier(" object store = 0.05 ").name == "object store"
    assert parse_tier("x=1e-3").gbps == 0.001
    for bad in ("nvme", "=3", "nvme=0", "nvme=-1", "nvme=fast"):
        with pytest.raises(ValueError, match="NAME=GB/s"):
            parse_tier(bad)
    assert [t.gbps for t in DEFAULT_TIERS] == [3.0, 1.0, 0.1]
    assert format_bandwidth(3.0) == "3 GB/s" and format_bandwidth(0.1) == "100 MB/s"


def _tensor_error(exact: bool) -> TensorError:
    return TensorError(0.0 if exact else 1e-3, 1.0, 0.0 if exact else 0.1, exact, 0)


def _result(label: str, stored: float, decode_ms: float, *, exact: bool = True,
            tv: float = 0.0, out: float = 0.0, raw: int = 1_000_000) -> SerdeResult:
    q = QualityMetrics(_tensor_error(exact), _tensor_error(exact), _tensor_error(exact),
                       0.0, 0.0, 0.0 if exact else tv, 0.0, 0.0 if exact else out, 16)
    r = SerdeResult(label, {"type": label}, raw_bytes_per_chunk=raw, stored_bytes_per_chunk=stored,
                    compression_ratio=raw / stored, decode_ms_per_chunk=decode_ms, quality=q)
    return r


def test_recommendation_picks_the_fastest_acceptable_load_per_tier() -> None:
    results = [
        _result("identity", 1_000_000, 0.1),
        _result("fast2x", 500_000, 0.1, exact=False, tv=0.01),  # halves, decodes at 10 GB/s
        _result("small4x", 250_000, 2.0, exact=False, tv=0.02),  # quarter, decodes at 0.5 GB/s
        _result("bad8x", 125_000, 0.1, exact=False, tv=0.5),  # over the quality bar
    ]
    tiers = [Tier("fast", 100.0), Tier("nvme", 3.0), Tier("slow", 0.1)]
    recs = recommend(results, tiers, max_attn_error=0.05)
    assert [r.tier for r in recs] == ["fast", "nvme", "slow"]
    assert recs[0].serde is None and recs[0].speedup_vs_raw == 1.0  # 10 us raw: nothing wins
    assert "no acceptable serde decodes fast enough" in recs[0].text
    assert recs[1].serde == "fast2x"  # 0.167+0.1 ms vs 0.333 ms raw
    assert recs[1].load_ms == pytest.approx(500_000 / 3e9 * 1e3 + 0.1)
    assert recs[1].raw_load_ms == pytest.approx(1e6 / 3e9 * 1e3)
    assert recs[1].speedup_vs_raw == pytest.approx(recs[1].raw_load_ms / recs[1].load_ms)
    assert recs[2].serde == "small4x"  # 2.5+2.0 ms beats 5.0+0.1 ms and 10 ms raw
    assert "bad8x" not in {r.serde for r in recs}
    lossless = recommend(results, tiers, max_attn_error=0.05, lossless_only=True)
    assert all(r.serde is None for r in lossless)
    assert "no acceptable serde stores fewer bytes than raw" in lossless[2].text


def test_acceptability_rules() -> None:
    lossy = _result("x", 1, 1, exact=False, tv=0.02)
    assert is_acceptable(lossy, max_attn_error=0.05, lossless_only=False)
    assert not is_acceptable(lossy, max_attn_error=0.01, lossless_only=False)
    assert not is_acceptable(lossy, max_attn_error=0.05, lossless_only=True)
    assert is_acceptable(_result("y", 1, 1), max_attn_error=0.0, lossless_only=True)
    v_lossy = _result("v", 1, 1, exact=False, tv=0.0, out=0.2)  # keys exact, values damaged
    assert not is_acceptable(v_lossy, max_attn_error=0.05, lossless_only=False)
    assert is_acceptable(v_lossy, max_attn_error=0.05, lossless_only=False, max_output_error=0.25)
    failed = _result("z", 1, 1)
    failed.status = "error"
    assert not is_acceptable(failed, max_attn_error=1.0, lossless_only=False)
    assert recommend([failed], DEFAULT_TIERS, max_attn_error=1.0) == []
