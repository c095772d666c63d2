"""LMCache's fp8 behaviour checklist (upstream-contract.md I.3, and the fp8 items of I.2)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from lmserde import (
    AsyncSerdeProcessor,
    MemoryLayoutDesc,
    ObjectKey,
    SerdeConfig,
    TensorMemoryObj,
    as_byte_tensor,
    create_serde_processor,
    register_serde_factory,
)
from lmserde.testing import wait_for_result
from lmserde_fp8 import Fp8QuantizationDeserializer, Fp8QuantizationSerializer

FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)
EXACT_VALUES = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0])
KEY = ObjectKey(b"\x01" * 32, "model", 0x01010101)


class BareObject:
    """A test double with only the ``.tensor`` attribute (what upstream's plain-tensor path uses)."""

    def __init__(self, tensor: torch.Tensor | None) -> None:
        self.tensor = tensor


def _fill_exact(obj: TensorMemoryObj, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    layout = obj.get_layout()
    offsets = layout.group_offsets()
    for i, (shape, dtype) in enumerate(zip(layout.shapes, layout.dtypes)):
        n = offsets[i + 1] - offsets[i]
        if not n:
            continue
        idx = torch.randint(0, len(EXACT_VALUES), shape, generator=gen)
        values = (EXACT_VALUES[idx] * torch.where(torch.rand(shape, generator=gen) < 0.5, -1.0, 1.0))
        obj.raw_data[offsets[i] : offsets[i + 1]].copy_(values.to(dtype).reshape(-1).view(torch.uint8))


def _randn(layout: MemoryLayoutDesc, seed: int, *, padding: int = 0) -> TensorMemoryObj:
    gen = torch.Generator().manual_seed(seed)
    obj = TensorMemoryObj.allocate(layout, padding=padding)
    offsets = layout.group_offsets()
    for i, (shape, dtype) in enumerate(zip(layout.shapes, layout.dtypes)):
        values = torch.randn(shape, generator=gen).to(dtype)
        obj.raw_data[offsets[i] : offsets[i + 1]].copy_(values.reshape(-1).view(torch.uint8))
    return obj


def _buffer(size: int, fill: int = 0) -> TensorMemoryObj:
    return TensorMemoryObj.from_tensor(torch.full((size,), fill, dtype=torch.uint8))


def _round_trip(layout: MemoryLayoutDesc, src: TensorMemoryObj, fp8: torch.dtype) -> TensorMemoryObj:
    ser, de = Fp8QuantizationSerializer(fp8), Fp8QuantizationDeserializer(fp8)
    blob = _buffer(ser.estimate_serialized_size(layout))
    assert ser.serialize(src, blob, KEY) == layout.numel
    out = TensorMemoryObj.allocate(layout, zero=True)
    de.deserialize(blob, out, KEY)
    return out


def _group(obj: TensorMemoryObj, i: int) -> torch.Tensor:
    layout = obj.get_layout()
    return obj.group_bytes(i).clone().view(layout.dtypes[i]).float()


def _corr(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.corrcoef(torch.stack([a.reshape(-1), b.reshape(-1)]))[0, 1])


# -- I.3 -----------------------------------------------------------------------------------------


def test_estimate_is_exactly_numel() -> None:
    ser = Fp8QuantizationSerializer()
    assert ser.estimate_serialized_size(MemoryLayoutDesc([[2, 4, 256, 128]], [torch.bfloat16])) == 262144
    two = MemoryLayoutDesc([[4, 8], [16]], [torch.float16, torch.float32])
    assert ser.estimate_serialized_size(two) == 48


def test_bf16_serialize_returns_numel_and_round_trips() -> None:
    layout = MemoryLayoutDesc([[2, 4, 256, 128]], [torch.bfloat16])
    src = _randn(layout, 0)
    out = _round_trip(layout, src, torch.float8_e4m3fn)
    assert _corr(_group(src, 0), _group(out, 0)) > 0.99


def test_missing_src_or_dst_tensor_raises() -> None:
    ser, de = Fp8QuantizationSerializer(), Fp8QuantizationDeserializer()
    with pytest.raises(ValueError, match="requires src and dst to have tensors"):
        ser.serialize(BareObject(None), _buffer(64), KEY)
    with pytest.raises(ValueError, match="requires src and dst to have tensors"):
        ser.serialize(BareObject(torch.zeros(8)), BareObject(None), KEY)
    with pytest.raises(ValueError, match="requires src and dst to have tensors"):
        de.deserialize(_buffer(64), BareObject(None), KEY)


MULTI_LAYOUTS = {
    "misaligned": MemoryLayoutDesc([[3], [4, 8], [5]], [torch.float16, torch.float32, torch.bfloat16]),
    "aligned": MemoryLayoutDesc([[4], [8, 2]], [torch.float32, torch.float16]),
    "same_dtype": MemoryLayoutDesc([[4, 4], [16]], [torch.bfloat16, torch.bfloat16]),
}


@pytest.mark.parametrize("fp8", FP8_DTYPES)
@pytest.mark.parametrize("name", sorted(MULTI_LAYOUTS))
def test_multi_group_fp8_exact_values_round_trip_bit_exactly(name: str, fp8: torch.dtype) -> None:
    layout = MULTI_LAYOUTS[name]
    src = TensorMemoryObj.allocate(layout)
    _fill_exact(src, 1)
    out = _round_trip(layout, src, fp8)
    for g in range(layout.num_groups):
        assert torch.equal(src.group_bytes(g), out.group_bytes(g)), f"group {g}"


def test_misaligned_layout_really_is_misaligned() -> None:
    obj = TensorMemoryObj.allocate(MULTI_LAYOUTS["misaligned"])
    assert not obj.group_is_aligned(1)


def test_tensor_on_multi_group_object_is_invalid() -> None:
    obj = TensorMemoryObj.allocate(MULTI_LAYOUTS["aligned"])
    with pytest.raises(RuntimeError, match="invalid"):
        _ = obj.tensor


def test_real_single_group_object_gives_the_plain_tensor_bytes() -> None:
    layout = MemoryLayoutDesc([[2, 3, 50]], [torch.bfloat16])
    real = _randn(layout, 4)
    bare = BareObject(real.tensor.clone())
    ser = Fp8QuantizationSerializer()
    a, b = _buffer(layout.numel), _buffer(layout.numel)
    assert ser.serialize(real, a, KEY) == ser.serialize(bare, b, KEY) == layout.numel
    assert torch.equal(a.raw_data, b.raw_data)
    assert torch.equal(a.raw_data, real.tensor.to(torch.float8_e4m3fn).view(torch.uint8).reshape(-1))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_randn_groups_round_trip(dtype: torch.dtype) -> None:
    layout = MemoryLayoutDesc([[7, 33], [5, 64]], [dtype, torch.bfloat16])
    src = _randn(layout, 5)
    out = _round_trip(layout, src, torch.float8_e4m3fn)
    for g in range(2):
        assert _corr(_group(src, g), _group(out, g)) > 0.99


def test_empty_middle_group_round_trips() -> None:
    layout = MemoryLayoutDesc([[4, 4], [0], [3, 5]], [torch.float16, torch.bfloat16, torch.float32])
    src = TensorMemoryObj.allocate(layout)
    _fill_exact(src, 6)
    out = _round_trip(layout, src, torch.float8_e4m3fn)
    assert torch.equal(src.raw_data, out.raw_data)


def test_tail_padding_is_neither_read_nor_written() -> None:
    layout = MemoryLayoutDesc([[3], [4, 8]], [torch.float16, torch.float32])
    padded = TensorMemoryObj.allocate(layout, padding=32)
    _fill_exact(padded, 7)
    padded.raw_data[layout.nbytes :] = 0xAB
    plain = TensorMemoryObj.allocate(layout)
    plain.raw_data.copy_(padded.raw_data[: layout.nbytes])
    ser, de = Fp8QuantizationSerializer(), Fp8QuantizationDeserializer()
    a, b = _buffer(layout.numel), _buffer(layout.numel)
    ser.serialize(padded, a, KEY)
    ser.serialize(plain, b, KEY)
    assert torch.equal(a.raw_data, b.raw_data)
    assert bool((padded.raw_data[layout.nbytes :] == 0xAB).all())
    out = TensorMemoryObj.allocate(layout, padding=32)
    out.raw_data.fill_(0xAB)
    de.deserialize(a, out, KEY)
    assert bool((out.raw_data[layout.nbytes :] == 0xAB).all())
    assert torch.equal(out.raw_data[: layout.nbytes], plain.raw_data)


def test_short_destination_and_short_source_raise() -> None:
    layout = MemoryLayoutDesc([[4, 8]], [torch.bfloat16])
    src = _randn(layout, 8)
    ser, de = Fp8QuantizationSerializer(), Fp8QuantizationDeserializer()
    with pytest.raises(ValueError, match="destination buffer too small"):
        ser.serialize(src, _buffer(31), KEY)
    with pytest.raises(ValueError, match="source buffer too small"):
        de.deserialize(_buffer(31), TensorMemoryObj.allocate(layout), KEY)


def test_narrowed_source_is_too_small() -> None:
    layout = MemoryLayoutDesc([[32]], [torch.float16])
    src = _buffer(32, 0x38)
    src.set_used_size(8)
    with pytest.raises(ValueError, match="source buffer too small"):
        Fp8QuantizationDeserializer().deserialize(src, TensorMemoryObj.allocate(layout), KEY)


def test_through_the_processor_narrowed_and_tail_untouched() -> None:
    layout = MemoryLayoutDesc([[3], [4, 8]], [torch.float16, torch.float32])
    src = TensorMemoryObj.allocate(layout)
    _fill_exact(src, 9)
    proc = create_serde_processor({"type": "fp8"})
    try:
        dst = _buffer(layout.numel + 1024, 0xCD)
        task = proc.submit_serialize([src], [dst], [KEY])
        assert wait_for_result(proc, task, serialize=True)
        assert dst.get_size() == layout.numel
        assert bool((dst.raw_data[layout.numel :] == 0xCD).all())
        out = TensorMemoryObj.allocate(layout, zero=True)
        task = proc.submit_deserialize([dst], [out], [KEY])
        assert wait_for_result(proc, task, serialize=False)
        assert torch.equal(out.raw_data, src.raw_data)
    finally:
        proc.close()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("fp8", FP8_DTYPES)
@pytest.mark.parametrize("name", sorted(MULTI_LAYOUTS))
def test_multi_group_round_trip_on_cuda(name: str, fp8: torch.dtype) -> None:
    layout = MULTI_LAYOUTS[name]
    host = TensorMemoryObj.allocate(layout)
    _fill_exact(host, 10)
    src = TensorMemoryObj.over(host.raw_data.cuda(), layout)
    ser, de = Fp8QuantizationSerializer(fp8), Fp8QuantizationDeserializer(fp8)
    blob = TensorMemoryObj.from_tensor(torch.zeros(layout.numel, dtype=torch.uint8, device="cuda"))
    ser.serialize(src, blob, KEY)
    out = TensorMemoryObj.over(torch.zeros(layout.nbytes, dtype=torch.uint8, device="cuda"), layout)
    de.deserialize(blob, out, KEY)
    assert torch.equal(out.raw_data.cpu(), host.raw_data)


# -- I.2 (fp8 items) -----------------------------------------------------------------------------


def test_fp8_is_available_and_builds_an_async_processor() -> None:
    proc = create_serde_processor(SerdeConfig(type="fp8", kwargs={"fp8_dtype": "float8_e4m3fn"}))
    try:
        assert isinstance(proc, AsyncSerdeProcessor)
        assert proc.get_serialize_event_fd() != proc.get_deserialize_event_fd()
        assert proc.serializer_group_size() is None
        assert proc.deserializer_group_size() is None
        assert proc.input_slot_mapping() is None
        assert proc.output_slot_mapping() is None
    finally:
        proc.close()


def test_max_workers_accepts_an_int() -> None:
    proc = create_serde_processor({"type": "fp8", "max_workers": 2})
    try:
        assert proc.max_workers == 2  # type: ignore[attr-defined]
    finally:
        proc.close()


@pytest.mark.parametrize("workers", [2.0, "2", True])
def test_max_workers_refuses_anything_but_an_int(workers: Any) -> None:
    with pytest.raises(ValueError, match="option 'max_workers' must be an integer"):
        create_serde_processor({"type": "fp8", "max_workers": workers})


def test_registering_fp8_again_is_rejected() -> None:
    with pytest.raises(ValueError, match="already registered"):
        register_serde_factory("fp8", lambda kwargs: None)  # type: ignore[arg-type, return-value]


def test_unknown_fp8_dtype_is_rejected_at_validation() -> None:
    with pytest.raises(ValueError, match="Unknown torch dtype: 'float8_e9m9'"):
        create_serde_processor({"type": "fp8", "fp8_dtype": "float8_e9m9"})


def test_non_fp8_dtype_is_rejected_at_validation_not_first_use() -> None:
    # upstream accepted any torch attribute (e.g. float16) and failed only at serialize time
    for name in ("float16", "bfloat16", "uint8", "float8_e4m3fnuz"):
        with pytest.raises(ValueError, match="fp8_dtype must be 'float8_e4m3fn' or 'float8_e5m2'"):
            create_serde_processor({"type": "fp8", "fp8_dtype": name})


def test_processor_round_trip_matches_the_bytes_of_the_torch_cast() -> None:
    layout = MemoryLayoutDesc([[2, 4, 16, 64]], [torch.bfloat16])
    src = _randn(layout, 12)
    for fp8 in ("float8_e4m3fn", "float8_e5m2"):
        proc = create_serde_processor({"type": "fp8", "fp8_dtype": fp8})
        try:
            dst = _buffer(proc.estimate_serialized_size(layout))
            task = proc.submit_serialize([src], [dst], [KEY])
            assert wait_for_result(proc, task, serialize=True)
            expected = src.tensor.to(getattr(torch, fp8)).view(torch.uint8).reshape(-1)
            assert torch.equal(as_byte_tensor(dst), expected)
        finally:
            proc.close()
