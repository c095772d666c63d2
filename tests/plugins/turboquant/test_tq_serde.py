"""The serializer and deserializer: round trips, raw layers, stream layout, determinism, errors."""

from __future__ import annotations

import hashlib
import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from lmserde import MemoryLayoutDesc, TensorMemoryObj
from lmserde_turboquant import (
    PRESETS,
    AllRawLayoutWarning,
    TurboQuantConfig,
    TurboQuantDeserializer,
    TurboQuantSerializer,
    codec_torch,
)
from lmserde_turboquant.layer_tables import layer_tables
from tq_support import KEY, deserialize, kv_tensor, needs_native, rel_error, serialize

# Relative error bound per part codec and bit width, on normal data (measured values + margin).
BOUNDS = {("fp8", 8): 0.03, ("mse", 4): 0.10, ("mse", 3): 0.19, ("mse", 2): 0.36,
          ("minmax", 4): 0.105, ("minmax", 3): 0.22}


def _serdes(**cfg: object) -> tuple[TurboQuantSerializer, TurboQuantDeserializer]:
    config = TurboQuantConfig(**cfg)  # type: ignore[arg-type]
    return TurboQuantSerializer(config), TurboQuantDeserializer(config)


@pytest.mark.parametrize("name", list(PRESETS))
@pytest.mark.parametrize("fused", [False, True])
def test_round_trip_error_bounds(name: str, fused: bool) -> None:
    p = PRESETS[name]
    ser, de = _serdes(preset=name, skip_first_layers=0, skip_last_layers=0)
    x = kv_tensor([2, 3, 40, 512], torch.bfloat16, seed=7)
    src = x.view(2, 3, 40, 4, 128).permute(1, 2, 3, 0, 4).reshape(1, 3, 40, 1024) if fused else x
    (y,) = deserialize(de, serialize(ser, src), src)
    if fused:
        y = y.view(3, 40, 4, 2, 128).permute(3, 0, 1, 2, 4).reshape(2, 3, 40, 512)
    assert rel_error(x[0], y[0]) <= BOUNDS[(p.key_codec, p.key_bits)]
    assert rel_error(x[1], y[1]) <= BOUNDS[(p.value_codec, p.value_bits)]


@pytest.mark.parametrize(("name", "corr", "ratio"), [("turboquant_k8v4", 0.95, 2.60),
                                                     ("turboquant_4bit_nc", 0.90, 3.75),
                                                     ("turboquant_k3v4_nc", 0.85, 4.20),
                                                     ("turboquant_3bit_nc", 0.80, 4.85)])
def test_lmcache_accuracy_targets(name: str, corr: float, ratio: float) -> None:
    ser, de = _serdes(preset=name, skip_first_layers=0, skip_last_layers=0)
    x = kv_tensor([2, 2, 128, 8 * 128], torch.float16, seed=3)
    data = serialize(ser, x)
    (y,) = deserialize(de, data, x)
    assert x.numel() * 2 / data.numel() >= ratio
    for half in (x, y):
        assert half.dtype == torch.float16
    assert torch.corrcoef(torch.stack([x.float().flatten(), y.float().flatten()]))[0, 1] > corr


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_raw_boundary_layers_round_trip_bit_exactly(dtype: torch.dtype) -> None:
    ser, de = _serdes(preset="tq2", skip_first_layers=2, skip_last_layers=1)
    x = kv_tensor([2, 6, 19, 256], dtype, seed=1)
    data = serialize(ser, x)
    (y,) = deserialize(de, data, x)
    for layer in (0, 1, 5):
        assert torch.equal(y[:, layer].view(torch.uint8), x[:, layer].view(torch.uint8))
    assert not torch.equal(y[:, 2], x[:, 2])  # the middle layers are quantized
    first = x[:, :2].contiguous().view(torch.uint8).flatten()
    last = x[:, 5:].contiguous().view(torch.uint8).flatten()
    assert torch.equal(data[: first.numel()], first)  # first_raw | compressed | last_raw
    assert torch.equal(data[-last.numel():], last)


def test_small_models_are_stored_entirely_raw_and_exact() -> None:
    ser, de = _serdes()
    x = kv_tensor([2, 4, 20, 512], torch.bfloat16, seed=2)
    with pytest.warns(AllRawLayoutWarning):
        data = serialize(ser, x)
    assert data.numel() == x.numel() * 2
    with pytest.warns(AllRawLayoutWarning):
        (y,) = deserialize(de, data, x)
    assert torch.equal(y, x)


@pytest.mark.parametrize("name", ["turboquant_k8v4", "turboquant_3bit_nc", "tq_k4v2"])
def test_stream_layout_blocks_tokens_heads(name: str) -> None:
    """compressed = [layer, token block, token in block, head, slot]; padding tokens are zero."""
    p = PRESETS[name]
    ser, _ = _serdes(preset=name, head_dim=64, block_size=8, skip_first_layers=1,
                     skip_last_layers=1)
    x = kv_tensor([2, 4, 13, 3 * 64], torch.float16, seed=4)
    cfg_plan = ser.config.plan(x.shape, x.dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        data = serialize(ser, x)
    stride = p.slot_stride(64)
    start = cfg_plan.first_raw_bytes
    area = data[start : start + cfg_plan.compressed_bytes].view(2, 2, 8, 3, stride)
    for lq, layer in enumerate((1, 2)):
        for t in (0, 7, 8, 12):
            for h in range(3):
                k = x[0, layer, t, h * 64 : (h + 1) * 64].unsqueeze(0)
                v = x[1, layer, t, h * 64 : (h + 1) * 64].unsqueeze(0)
                ref = torch.empty(1, stride, dtype=torch.uint8)
                codec_torch.encode_rows(k, v, ref, p, layer_tables(p, 64, layer))
                assert torch.equal(area[lq, t // 8, t % 8, h], ref[0]), (layer, t, h)
        assert int(area[lq, 1, 5:].count_nonzero()) == 0  # tokens 13..15 are padding


def test_fused_layout_has_the_same_compressed_bytes() -> None:
    ser, _ = _serdes(preset="turboquant_4bit_nc", skip_first_layers=1, skip_last_layers=1)
    x = kv_tensor([2, 5, 17, 512], torch.bfloat16, seed=5)
    fused = x.view(2, 5, 17, 4, 128).permute(1, 2, 3, 0, 4).reshape(1, 5, 17, 1024)
    a, b = serialize(ser, x), serialize(ser, fused)
    plan = ser.config.plan(x.shape, x.dtype)
    lo, hi = plan.first_raw_bytes, plan.first_raw_bytes + plan.compressed_bytes
    assert a.numel() == b.numel()
    assert torch.equal(a[lo:hi], b[lo:hi])
    assert torch.equal(b[:lo], fused[:, :1].contiguous().view(torch.uint8).flatten())


@pytest.mark.parametrize("name", list(PRESETS))
def test_bytes_are_deterministic_and_padding_is_zero(name: str) -> None:
    ser, _ = _serdes(preset=name, head_dim=8, block_size=16, skip_first_layers=0,
                     skip_last_layers=0)
    x = kv_tensor([2, 2, 5, 8 * 8], torch.bfloat16, seed=6)  # 8 heads of 8, odd slots for k8v4
    a = serialize(ser, x, fill=0x00)
    b = serialize(ser, x, fill=0xFF, padding=13)
    assert torch.equal(a, b)
    plan = ser.config.plan(x.shape, x.dtype)
    area = a.view(2, 16, 8, plan.slot_stride)
    assert int(area[:, 5:].count_nonzero()) == 0
    pad = plan.slot_stride - PRESETS[name].slot_bytes(8)
    if pad:
        assert int(area[..., -pad:].count_nonzero()) == 0


# sha256 of the stream of a fixed input: pins the format (codebooks, signs, packing, layout).
GOLDEN_SHA256 = {
    "turboquant_k8v4":
        "d108601e60c8fa321c583a0387d3cfb3874f28efe449f5456cf69808614cea59",
    "turboquant_4bit_nc":
        "c566ea8b388b19ee6e0a5d2fd5e8d1efde11169eae750e0d04354ac0aaa8105b",
    "turboquant_k3v4_nc":
        "3b2e5d92550814706b9601ece94c9a8394d8250e695ae95882b77846023a86b5",
    "turboquant_3bit_nc":
        "e938695b8afb6412ebd7315a6082a06db57f5bce5047146a9115c469be72677d",
    "tq4":
        "659bd385c51a8d2b6e66aa7560e69353dd1b20db6300e399d40df4129a852609",
    "tq3":
        "ea9504b727271d0dea6e4b58a7da030d96225487f4f91aad20528a8973f5a0fe",
    "tq2":
        "5a6f251713516b4cafbc9c9d72dd4c69f74b7235ccfbe86b5d0cc154448322b6",
    "tq_k4v3":
        "03c36e9777509028b5a20c260c0caf20f444f6f2f8a96ff4959195e0c180640a",
    "tq_k4v2":
        "1d16ed9741c2d0152978d9e14507c3679440ea2a5f304b97b2260094eb7f19ae",
    "tq_k3v2":
        "89e7d74661253bae8fe9f6fe27a6b97d95809867feae168e0ec9f06100645108",
}


def _golden_input() -> torch.Tensor:
    i = torch.arange(2 * 4 * 9 * 256, dtype=torch.float64)
    return (torch.sin(i * 0.37) * 3 + torch.cos(i * 0.011) * (i % 7)).reshape(2, 4, 9, 256).to(
        torch.bfloat16)


@pytest.mark.parametrize("name", list(PRESETS))
def test_golden_stream_digest(name: str) -> None:
    ser, _ = _serdes(preset=name, skip_first_layers=1, skip_last_layers=1, block_size=4)
    digest = hashlib.sha256(bytes(serialize(ser, _golden_input()).tolist())).hexdigest()
    assert digest == GOLDEN_SHA256[name]


def test_multi_group_objects_round_trip() -> None:
    ser, de = _serdes(preset="tq_k4v3", skip_first_layers=1, skip_last_layers=0)
    groups = [kv_tensor([2, 3, 10, 256], torch.bfloat16, seed=8),
              kv_tensor([1, 2, 0, 512], torch.float16, seed=9),
              kv_tensor([1, 3, 7, 256], torch.float32, seed=10)]
    data = serialize(ser, groups)
    assert data.numel() == sum(
        ser.estimate_serialized_size(MemoryLayoutDesc([g.shape], [g.dtype])) for g in groups)
    parts = [serialize(ser, g) for g in groups]
    assert torch.equal(data, torch.cat(parts))
    out = deserialize(de, data, groups)
    assert torch.equal(out[0][:, 0], groups[0][:, 0])
    assert rel_error(groups[0][:, 1:], out[0][:, 1:]) < 0.2
    assert out[1].numel() == 0
    assert rel_error(groups[2], out[2]) < 0.2


@needs_native
@pytest.mark.parametrize("name", ["turboquant_k8v4", "turboquant_k3v4_nc", "tq2"])
def test_native_and_torch_backends_give_identical_streams(name: str) -> None:
    x = kv_tensor([1, 5, 33, 512], torch.bfloat16, seed=11)
    native, _ = _serdes(preset=name, backend="native")
    torch_ser, torch_de = _serdes(preset=name, backend="torch")
    data = serialize(native, x)
    assert torch.equal(data, serialize(torch_ser, x))
    _, native_de = _serdes(preset=name, backend="native")
    assert torch.equal(deserialize(native_de, data, x)[0], deserialize(torch_de, data, x)[0])


def test_buffer_size_errors() -> None:
    ser, de = _serdes(preset="tq3", skip_first_layers=0, skip_last_layers=0)
    x = kv_tensor([2, 2, 8, 256], torch.bfloat16)
    n = ser.estimate_serialized_size(MemoryLayoutDesc([x.shape], [x.dtype]))
    small = TensorMemoryObj.allocate(MemoryLayoutDesc([[n - 1]], [torch.uint8]))
    with pytest.raises(ValueError, match=f"Destination buffer too small: got {n - 1} bytes, need {n}"):
        ser.serialize(TensorMemoryObj.from_tensor(x), small, KEY)
    data = serialize(ser, x)
    with pytest.raises(ValueError, match=f"Source buffer too small: got {n - 2} bytes, need {n}"):
        deserialize(de, data[: n - 2], x)
    deserialize(de, torch.cat([data, torch.zeros(50, dtype=torch.uint8)]), x)  # longer is fine


@pytest.mark.parametrize(("where", "value"), [((0, 1, 3, 5), float("nan")),
                                              ((1, 1, 6, 200), float("inf")),
                                              ((0, 0, 2, 7), 70000.0)])
def test_unencodable_values_are_reported_with_position(where: tuple[int, ...],
                                                        value: float) -> None:
    ser, _ = _serdes(preset="turboquant_4bit_nc", skip_first_layers=0, skip_last_layers=0)
    x = kv_tensor([2, 2, 8, 256], torch.float32)
    x[where] = value
    layer, token, head = where[1], where[2], where[3] // 128
    with pytest.raises(ValueError, match=f"layer {layer}, token {token}, head {head}"):
        serialize(ser, x)


def test_objects_without_tensors_are_rejected() -> None:
    class Bare:
        tensor = None

    ser, _ = _serdes()
    dst = TensorMemoryObj.allocate(MemoryLayoutDesc([[16]], [torch.uint8]))
    with pytest.raises(ValueError, match="tensor-backed"):
        ser.serialize(Bare(), dst, KEY)  # type: ignore[arg-type]


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(list(PRESETS)), fused=st.booleans(),
       dtype=st.sampled_from([torch.bfloat16, torch.float16, torch.float32]),
       layers=st.integers(0, 6), tokens=st.integers(0, 20), heads=st.integers(1, 3),
       log_d=st.integers(3, 6), block=st.integers(1, 9), first=st.integers(0, 3),
       last=st.integers(0, 3), seed=st.integers(0, 2**31 - 1))
def test_any_layout_round_trips_within_its_contract(
    name: str, fused: bool, dtype: torch.dtype, layers: int, tokens: int, heads: int, log_d: int,
    block: int, first: int, last: int, seed: int,
) -> None:
    d = 2**log_d
    ser, de = _serdes(preset=name, head_dim=d, block_size=block, skip_first_layers=first,
                      skip_last_layers=last)
    shape = [1, layers, tokens, heads * 2 * d] if fused else [2, layers, tokens, heads * d]
    x = kv_tensor(shape, dtype, seed=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AllRawLayoutWarning)
        plan = ser.config.plan(x.shape, x.dtype)
        data = serialize(ser, x, fill=0x00)
        assert torch.equal(data, serialize(ser, x, fill=0xFF))  # deterministic, padding zeroed
        (y,) = deserialize(de, data, x)
    assert data.numel() == plan.nbytes
    raw = [*range(plan.quant_start), *range(plan.quant_end, layers)]
    assert torch.equal(y[:, raw], x[:, raw])
    if plan.quant_layers and tokens:
        q = slice(plan.quant_start, plan.quant_end)
        assert rel_error(x[:, q], y[:, q]) < 0.5
