"""Quality goals: the paper's MSE, MSE values beating min/max values, the rotation vs outliers."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from lmserde_turboquant import PRESETS, TurboQuantPreset, codec_native, codec_torch
from lmserde_turboquant.layer_tables import layer_tables

D = 128
PAPER_MSE = {2: 0.117, 3: 0.0345, 4: 0.0095}  # TurboQuant-MSE, Zandieh et al. 2025


def _codec(p: TurboQuantPreset, k: torch.Tensor, v: torch.Tensor,
           ) -> tuple[torch.Tensor, torch.Tensor]:
    """Encode and decode rows with ``p`` (native codec when built: same bits, faster)."""
    tables = layer_tables(p, k.shape[1], 11)
    slots = torch.empty(k.shape[0], p.slot_stride(k.shape[1]), dtype=torch.uint8)
    mod = codec_native if codec_native.available() else codec_torch
    assert mod.encode_rows(k, v, slots, p, tables) == -1
    k_out, v_out = torch.empty_like(k), torch.empty_like(v)
    mod.decode_rows(slots, k_out, v_out, p, tables)
    return k_out, v_out


def _mse_preset(bits: int, nc: bool) -> TurboQuantPreset:
    return TurboQuantPreset(f"mse{bits}", "mse", bits, "mse", bits, nc, "exact", False, "")


def _minmax_preset(bits: int) -> TurboQuantPreset:
    """The min/max value path (LMCache's) at any bit width, for comparisons."""
    return dataclasses.replace(_mse_preset(bits, True), value_codec="minmax")


def _unit_rows(n: int, seed: int) -> torch.Tensor:
    x = torch.randn(n, D, generator=torch.Generator().manual_seed(seed))
    return x / x.norm(dim=1, keepdim=True)


def _rel_mse(x: torch.Tensor, y: torch.Tensor) -> float:
    return float(((x - y) ** 2).sum(dim=1).mean() / (x**2).sum(dim=1).mean())


@pytest.mark.parametrize("bits", [2, 3, 4])
def test_mse_on_unit_vectors_matches_the_paper(bits: int) -> None:
    x = _unit_rows(8192, seed=bits)
    plain, _ = _codec(_mse_preset(bits, nc=False), x, x)
    assert _rel_mse(x, plain) == pytest.approx(PAPER_MSE[bits], rel=0.03)
    corrected, _ = _codec(_mse_preset(bits, nc=True), x, x)  # our presets' decoding
    assert _rel_mse(x, corrected) <= PAPER_MSE[bits] * 1.03
    cos = torch.nn.functional.cosine_similarity(plain, x, dim=1).mean()
    assert cos > {2: 0.93, 3: 0.98, 4: 0.995}[bits]


@pytest.mark.parametrize("outliers", [False, True])
@pytest.mark.parametrize("bits", [2, 3])
def test_mse_values_beat_minmax_values_at_equal_bits(bits: int, outliers: bool) -> None:
    gen = torch.Generator().manual_seed(5)
    v = torch.randn(4096, D, generator=gen)
    if outliers:
        v[:, ::17] *= 8
    v = v.bfloat16()
    _, v_mse = _codec(_mse_preset(bits, nc=True), v, v)
    _, v_minmax = _codec(_minmax_preset(bits), v, v)
    assert _rel_mse(v.float(), v_mse.float()) < 0.8 * _rel_mse(v.float(), v_minmax.float())


def test_minmax_values_win_on_vectors_with_a_large_common_offset() -> None:
    """The documented limit: min/max removes a per-vector offset, TurboQuant-MSE does not."""
    gen = torch.Generator().manual_seed(5)
    v = (torch.randn(4096, D, generator=gen) + 2 * torch.randn(4096, 1, generator=gen)).bfloat16()
    _, v_mse = _codec(_mse_preset(3, nc=True), v, v)
    _, v_minmax = _codec(_minmax_preset(3), v, v)
    assert _rel_mse(v.float(), v_minmax.float()) < _rel_mse(v.float(), v_mse.float())


def test_our_value_presets_beat_lmcaches_at_three_bits() -> None:
    gen = torch.Generator().manual_seed(6)
    k = torch.randn(2048, D, generator=gen).bfloat16()
    v = torch.randn(2048, D, generator=gen).bfloat16()
    _, ours = _codec(PRESETS["tq3"], k, v)
    _, lmcache = _codec(PRESETS["turboquant_3bit_nc"], k, v)
    assert _rel_mse(v.float(), ours.float()) < _rel_mse(v.float(), lmcache.float())


def test_rotation_spreads_outlier_channels() -> None:
    """Keys with a few huge channels: the rotated 4-bit code keeps attention logits far better
    than a 4-bit min/max code of the same keys, which spends its range on the outliers."""
    gen = torch.Generator().manual_seed(7)
    k = torch.randn(4096, D, generator=gen)
    k[:, [3, 50, 91]] *= 25.0
    q = torch.randn(64, D, generator=gen)
    logits = q @ k.T
    k_tq, _ = _codec(_mse_preset(4, nc=True), k, k)
    _, k_minmax = _codec(_minmax_preset(4), k, k)  # the min/max path applied to the keys
    err_tq = float((q @ k_tq.T - logits).norm() / logits.norm())
    err_minmax = float((q @ k_minmax.T - logits).norm() / logits.norm())
    assert err_tq < 0.5 * err_minmax
