"""The native codec (AVX2 and portable scalar paths) equals the pure-torch reference bit for bit."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from lmserde_turboquant import codec_native, codec_torch
from lmserde_turboquant.layer_tables import layer_tables
from lmserde_turboquant.presets import PRESETS, TurboQuantPreset
from tq_support import needs_native

pytestmark = needs_native

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
PATHS = ["simd", "scalar"]


def _rows(n: int, d: int, dtype: torch.dtype, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    scale = torch.rand(n, 1, generator=gen) * 30
    k = (torch.randn(n, d, generator=gen) * scale).to(dtype)
    v = (torch.randn(n, d, generator=gen) * 3 + torch.randn(n, 1, generator=gen)).to(dtype)
    if n > 8:  # edge rows: zeros, negative zeros, constants, tiny and fp8-saturating values
        k[0] = 0
        v[1] = -0.0
        v[2] = 1.5
        k[3, 0] = 1e-6
        k[4] = 600.0
        v[5] = torch.linspace(-1000, 1000, d)
    return k, v


def _encode(path: str, k: torch.Tensor, v: torch.Tensor, p: TurboQuantPreset,
            layer: int) -> tuple[int, torch.Tensor]:
    out = torch.full((k.shape[0], p.slot_stride(k.shape[1])), 0xA5, dtype=torch.uint8)
    tables = layer_tables(p, k.shape[1], layer)
    if path == "torch":
        bad = codec_torch.encode_rows(k, v, out, p, tables)
    else:
        bad = codec_native.encode_rows(k, v, out, p, tables, simd=path == "simd")
    return bad, out


def _decode(path: str, slots: torch.Tensor, like: torch.Tensor, p: TurboQuantPreset,
            layer: int) -> tuple[torch.Tensor, torch.Tensor]:
    k, v = torch.empty_like(like), torch.empty_like(like)
    tables = layer_tables(p, like.shape[1], layer)
    if path == "torch":
        codec_torch.decode_rows(slots, k, v, p, tables)
    else:
        codec_native.decode_rows(slots, k, v, p, tables, simd=path == "simd")
    return k, v


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int32) if t.dtype == torch.float32 else t.view(torch.int16)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(PRESETS))
def test_native_equals_torch(name: str, dtype: torch.dtype, path: str) -> None:
    p = PRESETS[name]
    for d in (8, 64, 128, 256):
        k, v = _rows(67, d, dtype, seed=d)
        bad_ref, ref = _encode("torch", k, v, p, layer=3)
        bad, got = _encode(path, k, v, p, layer=3)
        assert bad == bad_ref == -1
        assert torch.equal(got, ref), f"{name} D={d} {dtype}: bytes differ"
        k_ref, v_ref = _decode("torch", ref, k, p, layer=3)
        k_got, v_got = _decode(path, ref, k, p, layer=3)
        assert torch.equal(_bits(k_got), _bits(k_ref)) and torch.equal(_bits(v_got), _bits(v_ref))


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(list(PRESETS)), dtype=st.sampled_from(DTYPES),
       log_d=st.integers(3, 10), n=st.integers(0, 40), layer=st.integers(0, 80),
       seed=st.integers(0, 2**31 - 1), path=st.sampled_from(PATHS))
def test_native_equals_torch_property(name: str, dtype: torch.dtype, log_d: int, n: int,
                                      layer: int, seed: int, path: str) -> None:
    p = PRESETS[name]
    k, v = _rows(n, 2**log_d, dtype, seed)
    bad_ref, ref = _encode("torch", k, v, p, layer)
    bad, got = _encode(path, k, v, p, layer)
    assert bad == bad_ref == -1 and torch.equal(got, ref)
    k_ref, v_ref = _decode("torch", ref, k, p, layer)
    k_got, v_got = _decode(path, ref, k, p, layer)
    assert torch.equal(_bits(k_got), _bits(k_ref)) and torch.equal(_bits(v_got), _bits(v_ref))


@pytest.mark.parametrize("path", ["torch", *PATHS])
@pytest.mark.parametrize("name", ["turboquant_k8v4", "turboquant_4bit_nc", "tq3"])
def test_unstorable_rows_are_reported(name: str, path: str) -> None:
    p = PRESETS[name]
    k, v = _rows(12, 128, torch.float32, seed=1)
    cases = {"nan key": (9, "k", float("nan")), "inf value": (7, "v", float("inf")),
             "huge value": (10, "v", 1e6), "huge key": (11, "k", 1e6)}
    for label, (row, which, value) in cases.items():
        kk, vv = k.clone(), v.clone()
        (kk if which == "k" else vv)[row, 5] = value
        bad, _ = _encode(path, kk, vv, p, layer=0)
        fp8_ok = p.key_codec == "fp8" and label == "huge key"  # fp8 keys saturate at 448
        assert bad == (-1 if fp8_ok else row), f"{name} {label}: got {bad}"


def test_strided_rows_as_in_the_fused_layout() -> None:
    p = PRESETS["turboquant_4bit_nc"]
    kv = torch.randn(50, 2 * 128).bfloat16()
    k, v = kv[:, :128], kv[:, 128:]
    _, ref = _encode("torch", k.contiguous(), v.contiguous(), p, layer=2)
    _, got = _encode("simd", k, v, p, layer=2)
    assert torch.equal(got, ref)
    out = torch.zeros(50, 256, dtype=torch.bfloat16)
    codec_native.decode_rows(ref, out[:, :128], out[:, 128:], p, layer_tables(p, 128, 2))
    k_ref, v_ref = _decode("torch", ref, k.contiguous(), p, layer=2)
    assert torch.equal(out[:, :128], k_ref) and torch.equal(out[:, 128:], v_ref)


def test_native_rejects_unsupported_tensors() -> None:
    p = PRESETS["tq4"]
    tables = layer_tables(p, 128, 0)
    k = torch.zeros(4, 128)
    slots = torch.zeros(4, p.slot_stride(128), dtype=torch.uint8)
    assert codec_native.supports(k, slots)
    assert not codec_native.supports(k.double(), slots)
    assert not codec_native.supports(k.t().contiguous().t(), slots)
    with pytest.raises(ValueError, match="slots must be"):
        codec_native.encode_rows(k, k, torch.zeros(4, 130, dtype=torch.uint8), p, tables)
    with pytest.raises(ValueError, match="unsupported tensors"):
        codec_native.encode_rows(k, k.half(), slots, p, tables)
    assert codec_native.simd_isa() in ("avx2", "scalar")
