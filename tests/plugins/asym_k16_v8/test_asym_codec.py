"""Tensor-level K16/V8 codec: the golden blob, bit-exact K, LMCache-equal V codes, integrity errors."""

from __future__ import annotations

import struct
import time

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from lmserde_asym_k16_v8.chunked import MIN_CHUNK_BYTES
from lmserde_asym_k16_v8.codec import HEADER_ALLOWANCE, AsymCodec
from lmserde_asym_k16_v8.encoded_kv import CorruptEncodedKVError, EncodedKVHeader
from lmserde_asym_k16_v8.quantization import per_tensor_scale
from lmserde_asym_k16_v8.scale_scope import ScaleScope, parse_scale_scope

E4M3 = torch.float8_e4m3fn


def reference_codes(v: torch.Tensor, scale: float) -> bytes:
    """LMCache's V codes: clamp(V as float32 / scale, -448, 448) cast to e4m3fn."""
    codes = torch.clamp(v.reshape(-1).float() / scale, -448.0, 448.0).to(E4M3)
    return bytes(codes.view(torch.uint8).numpy())


def encode(codec: AsymCodec, k: torch.Tensor | None, v: torch.Tensor, pad: int = 0) -> torch.Tensor:
    k_nbytes = 0 if k is None else k.numel() * k.element_size()
    out = torch.full((codec.estimate(k_nbytes, v.numel()) + pad,), 0xCD, dtype=torch.uint8)
    n = codec.encode_into(out, k, v)
    assert n <= codec.estimate(k_nbytes, v.numel())
    assert bool((out[n:] == 0xCD).all()), "bytes past the blob were written"
    return out[:n].clone()


def decode(
    codec: AsymCodec, blob: torch.Tensor, k_out: torch.Tensor | None, v_out: torch.Tensor | None
) -> None:
    codec.decode_into(blob, codec.locate(blob), k_out, v_out)


def golden_inputs() -> tuple[torch.Tensor, torch.Tensor]:
    k = (torch.arange(192, dtype=torch.float32) * 0.37 - 30.0).to(torch.bfloat16).reshape(2, 3, 4, 8)
    # |V| peaks at exactly 3.5, so the scale is 3.5 / 448 = 2**-7
    v = (torch.linspace(-3.5, 2.0, 192)).to(torch.bfloat16).reshape(2, 3, 4, 8)
    return k, v


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64])
def test_v_codes_and_scale_equal_lmcache(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(3)
    v = (torch.randn(5, 7, 33, generator=gen) * 3.1).to(dtype)
    blob = encode(AsymCodec(), None, v)
    header = EncodedKVHeader.unpack(bytes(blob.numpy()))
    start = header.header_len
    expected_scale = float(torch.tensor(v.float().abs().amax().item() / 448.0, dtype=torch.float32))
    (scale,) = struct.unpack("<f", bytes(blob[start + v.numel() :].numpy()))
    assert scale == expected_scale
    # torch's own float32 division gives the same scale
    assert scale == (v.float().abs().amax() / torch.tensor(448.0)).item()
    assert bytes(blob[start : start + v.numel()].numpy()) == reference_codes(v, scale)


_shapes = st.lists(st.integers(1, 9), min_size=1, max_size=4)


@settings(max_examples=40, deadline=None)
@given(
    k_shape=_shapes,
    v_shape=_shapes,
    k_dtype=st.sampled_from([torch.bfloat16, torch.float16, torch.float32, torch.uint8]),
    v_dtype=st.sampled_from([torch.bfloat16, torch.float16, torch.float32]),
    magnitude=st.floats(1e-3, 1e4),
    seed=st.integers(0, 2**31 - 1),
)
def test_round_trip_property(k_shape, v_shape, k_dtype, v_dtype, magnitude, seed) -> None:
    gen = torch.Generator().manual_seed(seed)
    k = torch.randint(0, 256, (int(torch.Size(k_shape).numel()) * k_dtype.itemsize,), generator=gen,
                      dtype=torch.uint8).view(k_dtype).reshape(k_shape)  # any bit pattern, NaN too
    v = (torch.randn(v_shape, generator=gen) * magnitude).to(v_dtype)
    codec = AsymCodec()
    blob = encode(codec, k, v, pad=5)
    k_out, v_out = torch.empty_like(k), torch.empty_like(v)
    decode(codec, blob, k_out, v_out)
    assert torch.equal(k_out.view(torch.uint8), k.view(torch.uint8)), "K is not bit-exact"
    scale = per_tensor_scale(v, E4M3)
    expected = torch.frombuffer(bytearray(reference_codes(v, scale)), dtype=E4M3).float() * scale
    assert torch.equal(v_out.reshape(-1), expected.to(v_dtype))


def test_v_error_median_below_upstream_bound() -> None:
    gen = torch.Generator().manual_seed(0)
    k = torch.randn(32, 64, 8, 128, generator=gen).to(torch.bfloat16)
    v = torch.randn(32, 64, 8, 128, generator=gen).to(torch.bfloat16)
    codec = AsymCodec()
    blob = encode(codec, k, v)
    k_out, v_out = torch.empty_like(k), torch.empty_like(v)
    decode(codec, blob, k_out, v_out)
    assert torch.equal(k_out, k)
    rel = ((v_out.float() - v.float()).abs() / v.float().abs().clamp_min(1e-6)).median().item()
    assert rel < 0.075


def test_all_zero_v_uses_unit_scale() -> None:
    v = torch.zeros(4, 8, dtype=torch.bfloat16)
    blob = encode(AsymCodec(), None, v)
    assert bytes(blob[-4:].numpy()) == struct.pack("<f", 1.0)
    assert int(blob[-36:-4].count_nonzero()) == 0


def test_empty_tensors_round_trip() -> None:
    codec = AsymCodec()
    k, v = torch.empty(0, 4, dtype=torch.bfloat16), torch.empty(3, 0, dtype=torch.bfloat16)
    blob = encode(codec, k, v)
    assert blob.numel() == 213 + 4
    decode(codec, blob, torch.empty_like(k), torch.empty_like(v))


def test_non_finite_v_keeps_nan_and_saturates_inf() -> None:
    """The scale comes from the finite values (LMCache's would be NaN/inf and every code NaN)."""
    v = torch.tensor([1.0, -2.0, float("nan"), float("inf"), -float("inf"), 0.5],
                     dtype=torch.bfloat16)
    codec = AsymCodec()
    blob = encode(codec, None, v)
    (scale,) = struct.unpack("<f", bytes(blob[-4:].numpy()))
    assert scale == struct.unpack("<f", struct.pack("<f", 2.0 / 448.0))[0]
    codes = blob[213 : 213 + 6].tolist()
    assert codes[2] & 0x7F == 0x7F  # NaN code
    assert codes[3] == 0x7E and codes[4] == 0xFE  # +-448: saturated
    assert bytes(blob[213 : 213 + 6].numpy())[:2] == reference_codes(v[:2], scale)
    out = torch.empty_like(v)
    decode(codec, blob, None, out)
    assert out[2].isnan()
    assert out.tolist()[3:5] == [2.0, -2.0]
    assert out.tolist()[:2] == [1.0, -2.0]


def test_all_non_finite_v_uses_unit_scale() -> None:
    blob = encode(AsymCodec(), None, torch.full((8,), float("nan")))
    assert bytes(blob[-4:].numpy()) == struct.pack("<f", 1.0)


def test_float64_v_goes_through_float32() -> None:
    v = torch.tensor([1e300, 1.0, -0.25, 1e-3], dtype=torch.float64)
    codec = AsymCodec()
    blob = encode(codec, None, v)
    # as float32 1e300 is +inf: ignored by the amax, saturated in the codes
    (scale,) = struct.unpack("<f", bytes(blob[-4:].numpy()))
    assert scale == struct.unpack("<f", struct.pack("<f", 1.0 / 448.0))[0]
    assert bytes(blob[213 + 1 : 213 + 4].numpy()) == reference_codes(v[1:], scale)
    out = torch.empty_like(v)
    decode(codec, blob, None, out)
    expected = torch.frombuffer(bytearray(reference_codes(v[1:], scale)), dtype=E4M3).float()
    assert out.tolist()[1:] == (expected * scale).double().tolist()
    assert out[0].item() == pytest.approx(1.0, rel=0.07)


@pytest.mark.parametrize("dtype", [E4M3, torch.float8_e5m2, torch.uint8, torch.int32])
def test_unquantizable_v_rejected(dtype: torch.dtype) -> None:
    v = torch.zeros(8, dtype=dtype)
    with pytest.raises(ValueError, match="V must be one of"):
        encode(AsymCodec(), None, v)


def test_unstorable_k_rejected() -> None:
    with pytest.raises(ValueError, match="K dtype int32 cannot be stored"):
        AsymCodec().encode_into(torch.empty(2000, dtype=torch.uint8), torch.zeros(4, dtype=torch.int32),
                                torch.zeros(4))


def test_destination_too_small() -> None:
    k, v = golden_inputs()
    out = torch.full((792,), 0xCD, dtype=torch.uint8)
    with pytest.raises(ValueError, match="destination buffer too small: the blob needs 793"):
        AsymCodec().encode_into(out, k, v)
    assert bool((out == 0xCD).all())
    with pytest.raises(ValueError, match="flat contiguous uint8"):
        AsymCodec().encode_into(torch.empty(2000, dtype=torch.int8), k, v)


def test_v_only_blob_layout() -> None:
    _, v = golden_inputs()
    blob = encode(AsymCodec(), None, v)
    header = EncodedKVHeader.unpack(bytes(blob.numpy()))
    assert (header.k_payload_len, header.v_payload_len, header.scale_payload_len) == (0, 192, 4)
    assert header.k_dtype is torch.bfloat16  # the informational K tag LMCache writes
    tagged = encode(AsymCodec(k_dtype_tag=torch.float16), None, v)
    assert EncodedKVHeader.unpack(bytes(tagged.numpy())).k_dtype is torch.float16


def test_v_only_blob_is_a_third_of_storage_only() -> None:
    k = torch.zeros(32, 64, 8, 128, dtype=torch.bfloat16)
    v = torch.randn(32, 64, 8, 128).to(torch.bfloat16)
    codec = AsymCodec()
    full = codec.header_for(k, v).blob_len
    v_only = codec.header_for(None, v).blob_len
    assert abs(v_only / full - 1 / 3) <= 0.005


def test_none_outputs_are_skipped() -> None:
    k, v = golden_inputs()
    codec = AsymCodec()
    blob = encode(codec, k, v)
    k_out = torch.full_like(k, 7.0)
    decode(codec, blob, k_out, None)
    assert torch.equal(k_out, k)
    v_out = torch.full_like(v, 7.0)
    decode(codec, blob, None, v_out)
    assert (v_out - v).abs().max().item() < 0.2


def test_non_contiguous_inputs_and_outputs() -> None:
    k, v = golden_inputs()
    kt, vt = k.transpose(1, 3), v.transpose(0, 2)
    codec = AsymCodec()
    blob = encode(codec, kt, vt)
    assert torch.equal(blob, encode(codec, kt.contiguous(), vt.contiguous()))
    k_out = torch.empty(3, 8, 4, 2, dtype=torch.bfloat16).transpose(0, 3)
    v_out = torch.empty(2, 3, 4, 8, dtype=torch.bfloat16).transpose(0, 2)
    assert not k_out.is_contiguous() and not v_out.is_contiguous()
    assert (k_out.shape, v_out.shape) == (kt.shape, vt.shape)
    decode(codec, blob, k_out, v_out)
    assert torch.equal(k_out, kt)
    assert (v_out.float() - vt.float()).abs().max().item() < 0.2


def test_trailing_bytes_are_ignored() -> None:
    k, v = golden_inputs()
    codec = AsymCodec()
    blob = torch.cat([encode(codec, k, v), torch.full((64,), 0xAB, dtype=torch.uint8)])
    k_out = torch.empty_like(k)
    decode(codec, blob, k_out, torch.empty_like(v))
    assert torch.equal(k_out, k)


def test_every_truncation_rejected() -> None:
    k, v = golden_inputs()
    codec = AsymCodec()
    blob = encode(codec, k, v)
    for cut in range(blob.numel()):
        with pytest.raises(CorruptEncodedKVError):
            decode(codec, blob[:cut].clone(), torch.empty_like(k), torch.empty_like(v))


@pytest.mark.parametrize("size", [(4, 8), (2 * MIN_CHUNK_BYTES + 1000,)])
def test_crc_detects_every_payload_section(size: tuple[int, ...]) -> None:
    gen = torch.Generator().manual_seed(1)
    k, v = torch.randn(size, generator=gen).to(torch.bfloat16), torch.randn(size, generator=gen)
    codec = AsymCodec()
    blob = encode(codec, k, v)
    header = EncodedKVHeader.unpack(bytes(blob[:300].numpy()))
    start = header.header_len
    for pos in (start, start + header.k_payload_len - 1, start + header.k_payload_len + 3,
                blob.numel() - 1):
        bad = blob.clone()
        bad[pos] ^= 0x01
        with pytest.raises(CorruptEncodedKVError, match="CRC-32 mismatch"):
            decode(codec, bad, torch.empty_like(k), torch.empty_like(v))
    bad = blob.clone()
    bad[start - 1] ^= 0x80  # the stored CRC itself
    with pytest.raises(CorruptEncodedKVError, match="CRC-32 mismatch"):
        decode(codec, bad, None, None)


def test_decode_checks_blob_against_destination() -> None:
    k, v = golden_inputs()
    codec = AsymCodec()
    blob = encode(codec, k, v)
    with pytest.raises(ValueError, match="blob K is 384 bytes of bfloat16, the K destination is 384 "
                                         "bytes of float16"):
        decode(codec, blob, torch.empty(2, 3, 4, 8, dtype=torch.float16), None)
    with pytest.raises(ValueError, match="the K destination is 382 bytes"):
        decode(codec, blob, torch.empty(191, dtype=torch.bfloat16), None)
    with pytest.raises(ValueError, match="blob V has 192 elements, the V destination has 191"):
        decode(codec, blob, None, torch.empty(191, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="V destination must be one of"):
        decode(codec, blob, None, torch.empty(192, dtype=torch.int16))


def _with_header_field(blob: torch.Tensor, offset: int, fmt: str, value: int) -> torch.Tensor:
    raw = bytearray(blob.numpy().tobytes())
    struct.pack_into(fmt, raw, offset, value)
    return torch.frombuffer(raw, dtype=torch.uint8)


def test_decode_refuses_unsupported_blob_kinds() -> None:
    k, v = golden_inputs()
    codec = AsymCodec()
    blob = encode(codec, k, v)
    with pytest.raises(ValueError, match="scale scope PER_LAYER_HEAD"):
        decode(codec, _with_header_field(blob, 10, "<H", 1), None, None)
    with pytest.raises(ValueError, match="stores V as float8_e5m2"):
        decode(codec, _with_header_field(blob, 14, "<H", 8), None, None)
    with pytest.raises(ValueError, match="blob scale is 4 bytes of float16"):
        decode(codec, _with_header_field(blob, 16, "<H", 2), None, None)


def test_codec_settings_validated() -> None:
    with pytest.raises(ValueError, match="fp8_dtype float8_e5m2 is not supported.*float8_e4m3fn"):
        AsymCodec(fp8_dtype=torch.float8_e5m2)
    with pytest.raises(ValueError, match="scale_dtype float16 is not supported; supported: float32"):
        AsymCodec(scale_dtype=torch.float16)
    with pytest.raises(ValueError, match="PER_LAYER_HEAD is not supported.*supported: PER_TENSOR"):
        AsymCodec(scale_scope=ScaleScope.PER_LAYER_HEAD)


def test_parse_scale_scope() -> None:
    assert parse_scale_scope("PER_TENSOR") is ScaleScope.PER_TENSOR
    with pytest.raises(ValueError, match="Unknown ScaleScope 'PER_ROW'. Valid: PER_TENSOR, "
                                         "PER_LAYER_HEAD, PER_PAGE_HEAD, EXTERNAL"):
        parse_scale_scope("PER_ROW")
    with pytest.raises(ValueError, match="EXTERNAL is not supported by asym_k16_v8; supported: "
                                         "PER_TENSOR"):
        parse_scale_scope("EXTERNAL")


def test_estimate_is_allowance_plus_payload() -> None:
    assert AsymCodec().estimate(384, 192) == HEADER_ALLOWANCE + 384 + 192 + 4


def test_failed_encode_returns_only_after_pool_work_stopped(monkeypatch) -> None:
    """An error while V is encoded surfaces only once the parallel K copy into ``out`` is over."""
    import lmserde_asym_k16_v8.codec as codec_module

    def failing_quantize(*args: object) -> None:
        raise RuntimeError("quantize failed")

    monkeypatch.setattr(codec_module, "quantize_v", failing_quantize)
    k = torch.randn(2 << 20).to(torch.bfloat16)  # 4 MiB: copied in chunks on the pool
    v = torch.randn(2 << 20).to(torch.bfloat16)
    codec = AsymCodec()
    out = torch.zeros(codec.estimate(k.numel() * 2, v.numel()), dtype=torch.uint8)
    for _ in range(3):
        out.zero_()
        with pytest.raises(RuntimeError, match="quantize failed"):
            codec.encode_into(out, k, v)
        snapshot = out.clone()
        time.sleep(0.02)  # a helper still running would keep writing meanwhile
        assert torch.equal(out, snapshot)
        assert torch.equal(out[213 : 213 + k.numel() * 2], k.view(torch.uint8))
