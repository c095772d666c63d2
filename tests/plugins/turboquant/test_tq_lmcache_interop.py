"""Interoperability with LMCache's arithmetic: same bytes up to boundary rounding, both readable."""

from __future__ import annotations

import pytest
import torch
import tq_lmcache_reference as lmc
from lmserde_turboquant import LMCACHE_PRESET_NAMES, PRESETS, codec_torch
from lmserde_turboquant.bitpack import unpack_indices
from lmserde_turboquant.layer_tables import layer_tables

N, D, LAYER = 2000, 128, 6


def _data(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(99)
    k = (torch.randn(N, D, generator=gen) * 2).to(dtype)
    v = (torch.randn(N, D, generator=gen) + 0.3).to(dtype)
    return k, v


def _ours(k: torch.Tensor, v: torch.Tensor, name: str) -> torch.Tensor:
    p = PRESETS[name]
    out = torch.empty(N, p.slot_stride(D), dtype=torch.uint8)
    assert codec_torch.encode_rows(k, v, out, p, layer_tables(p, D, LAYER)) == -1
    return out


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", LMCACHE_PRESET_NAMES)
def test_bytes_match_lmcache_arithmetic(name: str, dtype: torch.dtype) -> None:
    p = PRESETS[name]
    k, v = _data(dtype)
    ours, theirs = _ours(k, v, name), lmc.encode(k, v, p, LAYER)
    kps = p.key_bytes(D)
    # value parts and fp8 keys: identical bytes
    assert torch.equal(ours[:, kps:], theirs[:, kps:])
    if p.key_codec == "fp8":
        assert torch.equal(ours, theirs)
        return
    # MSE keys: indices equal except for coordinates on a boundary (float32 rounding order)
    nb = D * p.key_bits // 8
    same_idx = unpack_indices(ours[:, :nb], p.key_bits, D) == unpack_indices(
        theirs[:, :nb], p.key_bits, D)
    assert same_idx.float().mean() > 0.99995
    same_norm = (ours[:, nb : nb + 2] == theirs[:, nb : nb + 2]).all(dim=1)
    assert same_norm.float().mean() > 0.999


@pytest.mark.parametrize("name", LMCACHE_PRESET_NAMES)
def test_each_side_reads_the_others_bytes(name: str) -> None:
    p = PRESETS[name]
    k, v = _data(torch.float16)
    ours, theirs = _ours(k, v, name), lmc.encode(k, v, p, LAYER)
    tables = layer_tables(p, D, LAYER)
    # LMCache decoding our bytes equals our decoding of them up to its fp16 intermediates
    k_ref, v_ref = torch.empty(N, D), torch.empty(N, D)
    codec_torch.decode_rows(ours, k_ref, v_ref, p, tables)
    k_lmc, v_lmc = lmc.decode(ours, D, p, LAYER)
    assert float((k_lmc - k_ref).norm() / k_ref.norm()) < 2e-3
    assert torch.allclose(v_lmc, v_ref, rtol=1e-3, atol=1e-3)
    # and our decoding of LMCache's bytes is as accurate as of our own
    k_dec, v_dec = torch.empty(N, D), torch.empty(N, D)
    codec_torch.decode_rows(theirs, k_dec, v_dec, p, tables)
    err = float((k_dec - k.float()).norm() / k.float().norm())
    own = float((k_ref - k.float()).norm() / k.float().norm())
    assert err == pytest.approx(own, rel=0.01)
