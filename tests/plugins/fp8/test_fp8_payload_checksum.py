"""fp8 (``scaling: none``) computes the stored-object frame's payload checksum while it codes:
the native codec hashes each piece of codes (1 KiB on encode, 4 KiB on decode) right after
writing (store) or reading (load) it,
with the payload's bound hasher through lmserde's C API. The bytes are those of the unhashed
path, the checksum that of the frame's definition, and the wrapper hashes nothing itself; the
torch codec leaves the hashing to the wrapper."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from lmserde import MemoryLayoutDesc, TensorMemoryObj, checksum_kernel
from lmserde.frame_checksum import FramedPayload, checksum_bytes
from lmserde.l1 import L1Manager
from lmserde.l2 import create_l2_adapter, load_sync, store_sync
from lmserde.l2.serde import stored_frame
from lmserde.l2.serde.stored_frame import FRAME_HEADER_BYTES, parse_header
from lmserde.testing import adapter_key
from lmserde_fp8 import Fp8QuantizationDeserializer, Fp8QuantizationSerializer

PIECE = 4 << 10  # the native decode's hashed piece (a multiple of the encode's, 1 KiB)
pytestmark = pytest.mark.skipif(checksum_kernel() is None,
                                reason="lmserde was built without its checksum kernel")


def _object(shapes: list[list[int]], dtypes: list[torch.dtype], seed: int = 0) -> TensorMemoryObj:
    layout = MemoryLayoutDesc(shapes, dtypes)
    obj = TensorMemoryObj.allocate(layout)
    gen = torch.Generator().manual_seed(seed)
    for g, (shape, dtype) in enumerate(zip(shapes, dtypes)):
        values = torch.randn(shape, generator=gen).to(dtype)
        obj.group_bytes(g).copy_(values.reshape(-1).view(torch.uint8))  # groups may be misaligned
    return obj


def _framed(n: int) -> FramedPayload:
    return FramedPayload.from_tensor(torch.zeros(n, dtype=torch.uint8))  # type: ignore[return-value]


LAYOUTS = {
    "one piece": ([[3, 1000]], [torch.bfloat16]),
    "many pieces": ([[7, 40 * PIECE + 3]], [torch.bfloat16]),  # a destination that streams
    "groups": ([[3, PIECE // 2 + 5], [1, 999], [2, 3 * PIECE + 517]],
               [torch.float16, torch.float32, torch.bfloat16]),  # group 1 is misaligned
}


@pytest.mark.parametrize("name", sorted(LAYOUTS))
@pytest.mark.parametrize("fp8", [torch.float8_e4m3fn, torch.float8_e5m2], ids=["e4m3", "e5m2"])
@pytest.mark.parametrize("backend", ["auto", "portable", "torch"])
def test_the_hashed_path_writes_the_same_codes_and_their_checksum(name: str, fp8: torch.dtype,
                                                                  backend: str) -> None:
    src = _object(*LAYOUTS[name])
    serializer = Fp8QuantizationSerializer(fp8, backend=backend)  # type: ignore[arg-type]
    n = serializer.estimate_serialized_size(src.get_layout())
    plain = TensorMemoryObj.from_tensor(torch.zeros(n, dtype=torch.uint8))
    framed = _framed(n)
    assert serializer.serialize(src, plain, adapter_key(0)) == n
    assert serializer.serialize(src, framed, adapter_key(0)) == n
    assert torch.equal(framed.raw_data, plain.raw_data)
    hashes = backend != "torch"  # the torch codec leaves the hashing to the wrapper
    assert framed.verified_checksum(n) == (checksum_bytes(plain.raw_data) if hashes else None)
    # and the decode: the same values, the checksum of what it read
    deserializer = Fp8QuantizationDeserializer(fp8, backend=backend)  # type: ignore[arg-type]
    assert deserializer.reports_payload_checksum == hashes
    framed = _framed(n)
    framed.raw_data.copy_(plain.raw_data)
    want = TensorMemoryObj.allocate(src.get_layout(), zero=True)
    got = TensorMemoryObj.allocate(src.get_layout(), zero=True)
    deserializer.deserialize(plain, want, adapter_key(0))
    deserializer.deserialize(framed, got, adapter_key(0))
    assert torch.equal(got.raw_data, want.raw_data)
    assert framed.verified_checksum(n) == (checksum_bytes(plain.raw_data) if hashes else None)


def test_a_non_contiguous_destination_is_committed_once_whole() -> None:
    """A destination group without a contiguous view is decoded into a copy and copied back."""
    values = torch.randn(4, 2 * (1 << 20) // 4 + 3).to(torch.bfloat16)
    codes = values.to(torch.float8_e4m3fn).view(torch.uint8).reshape(-1).clone()
    framed = FramedPayload.from_tensor(codes)
    target = torch.zeros(values.shape[1], values.shape[0], dtype=torch.bfloat16).t()
    assert not target.is_contiguous()

    class _Strided:  # what object_groups makes of a destination exposing a strided tensor
        tensor = target

        def get_shapes(self) -> list[torch.Size]:
            return [target.shape]

        def get_dtypes(self) -> list[torch.dtype]:
            return [target.dtype]

    Fp8QuantizationDeserializer().deserialize(framed, _Strided(), adapter_key(0))  # type: ignore[arg-type]
    assert torch.equal(target, values.to(torch.float8_e4m3fn).to(torch.bfloat16))
    assert framed.verified_checksum(codes.numel()) == checksum_bytes(codes)


@pytest.mark.parametrize("scaling", ["per_tensor", "per_token"])
def test_scaled_modes_leave_the_hashing_to_the_wrapper(scaling: str) -> None:
    src = _object([[16, 512]], [torch.bfloat16])
    serializer = Fp8QuantizationSerializer(scaling=scaling)
    framed = _framed(serializer.estimate_serialized_size(src.get_layout()))
    n = serializer.serialize(src, framed, adapter_key(0))
    assert framed.verified_checksum(n) is None
    assert not Fp8QuantizationDeserializer(scaling=scaling).reports_payload_checksum


def test_through_the_wrapper_on_fs_nothing_is_hashed_twice(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    calls = {"n": 0}
    for name in ("payload_checksum", "start_payload_checksum", "xxh3_of_tensor"):
        real = getattr(stored_frame, name)

        def counted(*args: object, _real: object = real) -> object:
            calls["n"] += 1
            return _real(*args)  # type: ignore[operator]
        monkeypatch.setattr(stored_frame, name, counted)
    l1 = L1Manager(1 << 27)
    layout = MemoryLayoutDesc([[2, 8, (1 << 20) // 2]], [torch.bfloat16])
    key = adapter_key(1)
    with create_l2_adapter({"type": "fs", "base_path": str(tmp_path), "serde": {"type": "fp8"}},
                           l1) as wrapper:
        (_, obj), = l1.reserve_write([key], False, layout).values()
        obj.get_tensor(0).copy_(torch.randn(layout.shapes[0]).to(torch.bfloat16))
        original = obj.get_tensor(0).clone()
        l1.finish_write_and_reserve_read([key])
        assert store_sync(wrapper, [key], [obj]).is_successful()
        l1.finish_read([key])
        l1.delete([key])
        stored = Path(wrapper.inner_adapter.path_of(key)).read_bytes()  # type: ignore[attr-defined]
        payload = torch.frombuffer(bytearray(stored[FRAME_HEADER_BYTES:]), dtype=torch.uint8)
        assert parse_header(stored[:FRAME_HEADER_BYTES]).payload_checksum == checksum_bytes(payload)
        (_, dst), = l1.reserve_write([key], False, layout).values()
        assert load_sync(wrapper, [key], [dst]).test(0)
        assert torch.equal(dst.get_tensor(0), original.to(torch.float8_e4m3fn).to(torch.bfloat16))
        l1.finish_write_and_delete([key])
    assert calls["n"] == 0


def test_the_native_codec_hashes_inside_its_loop_and_still_streams() -> None:
    """With the native kernels the codes never go through :meth:`PayloadHasher.update` (the C
    kernel feeds the hasher piece by piece), and a large decode still writes with streaming
    stores."""
    from lmserde import PayloadHasher
    from lmserde_fp8 import kernel
    from lmserde_fp8.codec import decode_hashed, encode_hashed
    from lmserde_fp8.float_buffer import FloatBuffer
    from lmserde_fp8.formats import fp8_format

    if kernel.simd_level() < 1:
        pytest.skip("needs the native AVX2 kernels")

    class _NoPython(PayloadHasher):
        def update(self, data: torch.Tensor) -> None:
            raise AssertionError("hashed in Python")

    fmt = fp8_format(torch.float8_e4m3fn)
    values = torch.randn(2 << 20).to(torch.bfloat16)  # a 4 MiB destination streams
    codes = torch.empty(values.numel(), dtype=torch.uint8)
    hasher = _NoPython()
    encode_hashed(FloatBuffer(values, torch.bfloat16), codes, fmt, hasher)
    assert hasher.nbytes == codes.numel() and hasher.digest() == checksum_bytes(codes)
    out = torch.empty_like(values)
    streamed = kernel.native_module().streamed_decodes()
    hasher = _NoPython()
    decode_hashed(codes, FloatBuffer(out, torch.bfloat16), fmt, hasher)
    assert hasher.digest() == checksum_bytes(codes)
    assert kernel.native_module().streamed_decodes() == streamed + 1
    assert torch.equal(out, values.to(torch.float8_e4m3fn).to(torch.bfloat16))
