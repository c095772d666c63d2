"""Serde chains as a processor: composed estimates, framing after upper-bound stages, contracts."""

from __future__ import annotations

import select

import pytest
import torch
from lmserde import (
    AsyncSerdeProcessor,
    Deserializer,
    MemoryLayoutDesc,
    MemoryObj,
    ObjectKey,
    Serializer,
    TensorMemoryObj,
    as_byte_tensor,
    single_to_multi_deserializer,
    single_to_multi_serializer,
)
from lmserde.identity import IdentityDeserializer, IdentitySerializer
from lmserde.l2 import ChainStage, SerdeChainProcessor, create_serde_chain
from lmserde.registry import register_serde_factory, unregister_serde_factory
from lmserde.serde_chain import FRAME_HEADER_BYTES
from lmserde.spec import SerdeSizeContract
from lmserde.testing import random_object, wait_for_result

EXACT, UPPER = SerdeSizeContract.EXACT, SerdeSizeContract.UPPER_BOUND
KEY = ObjectKey(b"chain", "m", 0)
LAYOUT = MemoryLayoutDesc([[6, 10]], [torch.float16])  # 120 bytes


class XorSerializer(Serializer):
    """Adds one tag byte in front, XORs the payload: EXACT, estimate = input + 1."""

    def serialize(self, src: MemoryObj, dst: MemoryObj, key: ObjectKey) -> int:
        data = as_byte_tensor(src)
        out = as_byte_tensor(dst)
        out[0] = 0x42
        out[1:1 + data.numel()] = data ^ 0x5A
        return data.numel() + 1

    def estimate_serialized_size(self, layout_desc: MemoryLayoutDesc) -> int:
        return layout_desc.nbytes + 1


class XorDeserializer(Deserializer):
    def deserialize(self, src: MemoryObj, dst: MemoryObj, key: ObjectKey) -> None:
        data = as_byte_tensor(src)
        out = as_byte_tensor(dst)
        if data.numel() < out.numel() + 1 or int(data[0]) != 0x42:
            raise ValueError("xor: bad frame")
        out.copy_(data[1:1 + out.numel()] ^ 0x5A)


class HalfSerializer(IdentitySerializer):
    """Upper bound: writes only the first half of the bytes (estimate: all of them)."""

    def serialize(self, src: MemoryObj, dst: MemoryObj, key: ObjectKey) -> int:
        data = as_byte_tensor(src)
        half = data.numel() // 2
        as_byte_tensor(dst)[:half] = data[:half]
        return half


class HalfDeserializer(Deserializer):
    def deserialize(self, src: MemoryObj, dst: MemoryObj, key: ObjectKey) -> None:
        out = as_byte_tensor(dst)
        data = as_byte_tensor(src)
        half = out.numel() // 2
        if data.numel() != half:  # needs the exact intermediate length
            raise ValueError(f"half: got {data.numel()} bytes, expected {half}")
        out.zero_()
        out[:half] = data


def _chain(*stages: tuple[str, Serializer, Deserializer, SerdeSizeContract]
           ) -> SerdeChainProcessor:
    return SerdeChainProcessor([ChainStage(*s) for s in stages])


def _round_trip(proc: SerdeChainProcessor, src: TensorMemoryObj
                ) -> tuple[TensorMemoryObj, TensorMemoryObj]:
    size = proc.estimate_serialized_size(src.get_layout())
    blob = TensorMemoryObj.allocate(MemoryLayoutDesc([[size]], [torch.uint8]), zero=True)
    assert wait_for_result(proc, proc.submit_serialize([src], [blob], [KEY]), serialize=True)
    out = TensorMemoryObj.allocate(src.get_layout(), zero=True)
    assert wait_for_result(proc, proc.submit_deserialize([blob], [out], [KEY]), serialize=False)
    return blob, out


def test_exact_stages_compose_without_framing() -> None:
    proc = _chain(("xor", XorSerializer(), XorDeserializer(), EXACT),
                  ("xor2", XorSerializer(), XorDeserializer(), EXACT))
    try:
        assert proc.serde_type == "xor+xor2" and proc.stage_types == ("xor", "xor2")
        assert proc.size_contract is EXACT
        assert proc.estimate_serialized_size(LAYOUT) == LAYOUT.nbytes + 2
        src = random_object(LAYOUT, 1)
        blob, out = _round_trip(proc, src)
        assert blob.get_size() == LAYOUT.nbytes + 2
        inner = as_byte_tensor(src) ^ 0x5A
        expected = torch.cat([torch.tensor([0x42, 0x42 ^ 0x5A], dtype=torch.uint8),
                              inner ^ 0x5A])
        assert torch.equal(as_byte_tensor(blob), expected)  # exactly xor2(xor(x))
        assert torch.equal(out.raw_data, src.raw_data)
    finally:
        proc.close()


def test_an_upper_bound_stage_before_a_byte_transform_hands_over_only_what_it_wrote() -> None:
    """[compress, encrypt]-like: the EXACT stage sees the trimmed frame, so the saving is kept."""
    proc = _chain(("half", HalfSerializer(), HalfDeserializer(), UPPER),
                  ("xor", XorSerializer(), XorDeserializer(), EXACT))
    try:
        assert proc.size_contract is UPPER  # what "half" saves reaches the stored object
        assert proc.estimate_serialized_size(LAYOUT) == FRAME_HEADER_BYTES + LAYOUT.nbytes + 1
        src = random_object(LAYOUT, 2)
        blob, out = _round_trip(proc, src)
        half = LAYOUT.nbytes // 2
        assert blob.get_size() == FRAME_HEADER_BYTES + half + 1  # no padding stored
        frame = as_byte_tensor(blob)[1:] ^ 0x5A
        assert int.from_bytes(bytes(frame[:8].tolist()), "little") == half
        assert torch.equal(out.raw_data[:half], src.raw_data[:half])
    finally:
        proc.close()


def test_an_upper_bound_stage_before_another_is_framed_and_padded() -> None:
    proc = _chain(("half", HalfSerializer(), HalfDeserializer(), UPPER),
                  ("half2", HalfSerializer(), HalfDeserializer(), UPPER))
    try:
        size = FRAME_HEADER_BYTES + LAYOUT.nbytes
        src = random_object(LAYOUT, 3)
        blob, out = _round_trip(proc, src)
        assert blob.get_size() == size // 2  # half of the padded frame
        frame = as_byte_tensor(blob)
        assert int.from_bytes(bytes(frame[:8].tolist()), "little") == LAYOUT.nbytes // 2
        quarter = size // 2 - FRAME_HEADER_BYTES
        assert torch.equal(out.raw_data[:quarter], src.raw_data[:quarter])
    finally:
        proc.close()


def test_upper_bound_last_stage_makes_the_chain_upper_bound() -> None:
    proc = _chain(("xor", XorSerializer(), XorDeserializer(), EXACT),
                  ("half", HalfSerializer(), HalfDeserializer(), UPPER))
    try:
        assert proc.size_contract is UPPER
    finally:
        proc.close()


def test_a_corrupt_frame_length_fails_that_item_only() -> None:
    proc = _chain(("half", HalfSerializer(), HalfDeserializer(), UPPER),
                  ("xor", XorSerializer(), XorDeserializer(), EXACT))
    try:
        srcs = [random_object(LAYOUT, i) for i in range(2)]
        size = proc.estimate_serialized_size(LAYOUT)
        blobs = [TensorMemoryObj.allocate(MemoryLayoutDesc([[size]], [torch.uint8]))
                 for _ in srcs]
        assert wait_for_result(proc, proc.submit_serialize(srcs, blobs, [KEY, KEY]),
                               serialize=True)
        as_byte_tensor(blobs[0])[1:9] = torch.tensor([0xFF] * 8, dtype=torch.uint8) ^ 0x5A
        outs = [TensorMemoryObj.allocate(LAYOUT) for _ in srcs]
        task = proc.submit_deserialize(blobs, outs, [KEY, KEY])
        outcome = None
        while outcome is None:
            select.select([proc.get_deserialize_event_fd()], [], [], 1.0)
            outcome = proc.query_deserialize_outcome(task)
        assert outcome.failed_items == (0,)
        assert "corrupt frame after stage 'half'" in str(outcome.item_errors[0])
    finally:
        proc.close()


def test_exact_stage_that_lies_is_caught() -> None:
    proc = _chain(("liar", HalfSerializer(), HalfDeserializer(), EXACT),
                  ("xor", XorSerializer(), XorDeserializer(), EXACT))
    try:
        src = random_object(LAYOUT, 3)
        size = proc.estimate_serialized_size(LAYOUT)
        blob = TensorMemoryObj.allocate(MemoryLayoutDesc([[size]], [torch.uint8]))
        assert not wait_for_result(proc, proc.submit_serialize([src], [blob], [KEY]),
                                   serialize=True)
    finally:
        proc.close()


def test_only_the_first_stage_may_be_multi_output() -> None:
    multi = ChainStage("m", single_to_multi_serializer(XorSerializer()),
                       single_to_multi_deserializer(XorDeserializer()), EXACT)
    plain = ChainStage("x", XorSerializer(), XorDeserializer(), EXACT)
    with pytest.raises(ValueError, match="only the first serde may be multi-output; 'm'"):
        SerdeChainProcessor([plain, multi])
    proc = SerdeChainProcessor([multi, plain])
    try:
        assert proc.serializer_group_size() == 1 and proc.input_slot_mapping() == (0,)
    finally:
        proc.close()
    with pytest.raises(ValueError, match="at least one stage"):
        SerdeChainProcessor([])


def test_create_from_configs_builds_and_owns_stage_processors() -> None:
    chain = create_serde_chain([{"type": "identity", "max_workers": 2}, {"type": "identity"}])
    try:
        assert chain.max_workers == 2 and chain.size_contract is EXACT
        src = random_object(LAYOUT, 4)
        _, out = _round_trip(chain, src)
        assert torch.equal(out.raw_data, src.raw_data)
    finally:
        chain.close()
    with pytest.raises(ValueError, match="at least one serde"):
        create_serde_chain([])

    class Opaque(AsyncSerdeProcessor):
        def serde_pair(self) -> None:  # type: ignore[override]
            return None  # a processor that runs no pair of its own

    register_serde_factory("opaque-test", lambda kw: Opaque(IdentitySerializer(),
                                                            IdentityDeserializer()))
    try:
        with pytest.raises(ValueError, match="'opaque-test' cannot be chained"):
            create_serde_chain([{"type": "identity"}, {"type": "opaque-test"}])
    finally:
        unregister_serde_factory("opaque-test")
