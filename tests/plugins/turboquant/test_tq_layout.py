"""KV layouts: parsing, validation errors, layer split and the exact stream size."""

from __future__ import annotations

import warnings

import pytest
import torch
from lmserde import MemoryLayoutDesc
from lmserde_turboquant import AllRawLayoutWarning, KVPlan, TurboQuantConfig, TurboQuantSerializer


def _plan(shape: list[int], dtype: torch.dtype = torch.bfloat16, **cfg: object) -> KVPlan:
    return TurboQuantConfig(**cfg).plan(torch.Size(shape), dtype)  # type: ignore[arg-type]


def test_split_and_fused_parse_to_the_same_geometry() -> None:
    with pytest.warns(AllRawLayoutWarning):
        split = _plan([2, 3, 20, 512])
    with pytest.warns(AllRawLayoutWarning):
        fused = _plan([1, 3, 20, 1024])
    for p in (split, fused):
        assert (p.num_layers, p.num_tokens, p.num_heads, p.head_dim) == (3, 20, 4, 128)
    assert not split.fused and fused.fused


@pytest.mark.parametrize("kv", [0, 3, -1])
def test_bad_kv_size_is_rejected(kv: int) -> None:
    with pytest.raises(ValueError, match=r"kv_size 1 \(fused K/V\) or 2"):
        _plan([kv, 3, 20, 512])


@pytest.mark.parametrize(("shape", "what"), [([2, 3, 20, 500], "head_dim=128"),
                                             ([2, 3, 20, 513], "head_dim=128"),
                                             ([1, 3, 20, 1152], "2\\*head_dim=256")])
def test_hidden_size_must_divide(shape: list[int], what: str) -> None:
    with pytest.raises(ValueError, match=f"must be divisible by {what}"):
        _plan(shape)


@pytest.mark.parametrize("shape", [[2, 3, 20], [2, 3, 20, 4, 128], []])
def test_non_4d_is_rejected(shape: list[int]) -> None:
    with pytest.raises(ValueError, match="TurboQuant serde expects 4D KV tensor"):
        _plan(shape)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float64, torch.int32, torch.float8_e4m3fn])
def test_unsupported_dtypes_are_rejected(dtype: torch.dtype) -> None:
    with pytest.raises(ValueError, match="supports bfloat16, float16 and float32"):
        _plan([2, 8, 20, 512], dtype)


def test_default_skips_store_small_models_raw_with_a_warning() -> None:
    ser = TurboQuantSerializer(TurboQuantConfig())
    with pytest.warns(AllRawLayoutWarning, match="every layer is stored raw"):
        n = ser.estimate_serialized_size(MemoryLayoutDesc([[2, 3, 20, 512]], [torch.bfloat16]))
    assert n == 2 * 3 * 20 * 512 * 2


def test_no_warning_when_something_is_compressed() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _plan([2, 5, 20, 512]).quant_layers == 1
        assert _plan([2, 2, 20, 512], skip_first_layers=0, skip_last_layers=0).quant_layers == 2
        assert _plan([2, 0, 20, 512]).nbytes == 0  # nothing to store, nothing to warn about


@pytest.mark.parametrize(("layers", "first", "last", "expected"),
                         [(10, 2, 2, (2, 8)), (10, 0, 0, (0, 10)), (10, 7, 7, (7, 7)),
                          (3, 5, 0, (3, 3)), (6, 1, 9, (1, 1))])
def test_layer_split(layers: int, first: int, last: int, expected: tuple[int, int]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AllRawLayoutWarning)
        p = _plan([2, layers, 4, 256], skip_first_layers=first, skip_last_layers=last)
    assert (p.quant_start, p.quant_end) == expected


@pytest.mark.parametrize("preset", ["turboquant_k8v4", "turboquant_3bit_nc", "tq2"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_exact_size_formula(preset: str, dtype: torch.dtype) -> None:
    cfg = TurboQuantConfig(preset=preset, block_size=16)
    p = cfg.plan(torch.Size([2, 9, 37, 1024]), dtype)
    slot = cfg.preset_spec.slot_stride(128)
    raw = 2 * 4 * 37 * 1024 * dtype.itemsize
    assert p.nbytes == raw + 5 * 48 * 8 * slot  # 5 layers, 37 tokens padded to 48, 8 heads


def test_fused_and_split_give_equal_estimates_and_raw_bytes() -> None:
    ser = TurboQuantSerializer(TurboQuantConfig(preset="turboquant_k3v4_nc"))
    for layers in (3, 7):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", AllRawLayoutWarning)
            split = ser.estimate_serialized_size(
                MemoryLayoutDesc([[2, layers, 20, 512]], [torch.bfloat16]))
            fused = ser.estimate_serialized_size(
                MemoryLayoutDesc([[1, layers, 20, 1024]], [torch.bfloat16]))
        assert split == fused
    with pytest.warns(AllRawLayoutWarning):
        assert _plan([1, 3, 20, 1024]).nbytes == 3 * 20 * 1024 * 2


def test_multi_group_estimate_is_the_sum() -> None:
    ser = TurboQuantSerializer(TurboQuantConfig(preset="tq3"))
    a, b = [2, 6, 16, 256], [1, 6, 8, 512]
    both = ser.estimate_serialized_size(
        MemoryLayoutDesc([a, b], [torch.bfloat16, torch.float16]))
    one = ser.estimate_serialized_size(MemoryLayoutDesc([a], [torch.bfloat16]))
    two = ser.estimate_serialized_size(MemoryLayoutDesc([b], [torch.float16]))
    assert both == one + two


def test_a_bad_group_fails_the_estimate() -> None:
    ser = TurboQuantSerializer(TurboQuantConfig())
    with pytest.raises(ValueError, match="must be divisible"):
        ser.estimate_serialized_size(
            MemoryLayoutDesc([[2, 6, 16, 256], [2, 6, 16, 100]], [torch.bfloat16] * 2))
