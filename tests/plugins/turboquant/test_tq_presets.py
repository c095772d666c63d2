"""Presets: LMCache's size table, our TurboQuant-MSE presets, lookup errors."""

from __future__ import annotations

import pytest
from lmserde_turboquant.presets import LMCACHE_PRESET_NAMES, PRESETS, get_preset

# (KPS, VPS, slot, aligned) at D = 128, from LMCache's TurboQuant serde.
LMCACHE_SIZES = {
    "turboquant_k8v4": (128, 68, 196, 196),
    "turboquant_4bit_nc": (66, 68, 134, 134),
    "turboquant_k3v4_nc": (50, 68, 118, 118),
    "turboquant_3bit_nc": (50, 52, 102, 102),
}
OUR_SIZES = {
    "tq4": (66, 66, 132, 132),
    "tq3": (50, 50, 100, 100),
    "tq2": (34, 34, 68, 68),
    "tq_k4v3": (66, 50, 116, 116),
    "tq_k4v2": (66, 34, 100, 100),
    "tq_k3v2": (50, 34, 84, 84),
}


@pytest.mark.parametrize(("name", "sizes"), [*LMCACHE_SIZES.items(), *OUR_SIZES.items()])
def test_size_table_at_d128(name: str, sizes: tuple[int, int, int, int]) -> None:
    p = get_preset(name)
    assert (p.key_bytes(128), p.value_bytes(128), p.slot_bytes(128), p.slot_stride(128)) == sizes


def test_odd_slots_are_padded_to_even() -> None:
    p = get_preset("turboquant_k8v4")
    assert p.slot_bytes(8) == 8 + 4 + 4 and p.slot_stride(8) == 16
    odd = [(n, d) for n, q in PRESETS.items() for d in (8, 16, 32) if q.slot_bytes(d) % 2]
    for name, d in odd:
        assert PRESETS[name].slot_stride(d) == PRESETS[name].slot_bytes(d) + 1


def test_lmcache_presets_and_their_codecs() -> None:
    assert tuple(LMCACHE_SIZES) == LMCACHE_PRESET_NAMES
    k8v4, k3v4 = get_preset("turboquant_k8v4"), get_preset("turboquant_k3v4_nc")
    assert (k8v4.key_codec, k8v4.key_bits, k8v4.value_bits, k8v4.norm_correction) == (
        "fp8", 8, 4, False)
    assert (k3v4.key_codec, k3v4.key_bits, k3v4.value_bits, k3v4.norm_correction) == (
        "mse", 3, 4, True)
    assert (k8v4.key_bits, k8v4.value_bits) != (k3v4.key_bits, k3v4.value_bits)
    for name in LMCACHE_PRESET_NAMES:
        p = PRESETS[name]
        assert p.lmcache_compatible and p.value_codec == "minmax"
        assert p.codebook_solver == "lmcache"


def test_our_presets_code_values_with_turboquant_mse() -> None:
    for name in OUR_SIZES:
        p = PRESETS[name]
        assert p.key_codec == p.value_codec == "mse" and p.norm_correction
        assert p.codebook_solver == "exact" and not p.lmcache_compatible


def test_compression_ratios() -> None:
    ratios = {n: round(p.compression_ratio(128), 2) for n, p in PRESETS.items()}
    assert ratios["turboquant_k8v4"] == 2.61 and ratios["turboquant_3bit_nc"] == 5.02
    assert ratios["tq2"] == 7.53 and ratios["tq3"] == 5.12 and ratios["tq4"] == 3.88


def test_unknown_preset_lists_the_valid_ones() -> None:
    with pytest.raises(ValueError, match="Unsupported TurboQuant preset: 'turbo'") as err:
        get_preset("turbo")
    assert "turboquant_k8v4, turboquant_4bit_nc, turboquant_k3v4_nc, turboquant_3bit_nc" in str(
        err.value)
    with pytest.raises(ValueError, match="Unsupported TurboQuant preset"):
        get_preset(None)  # type: ignore[arg-type]
