"""A serde that hashes its payload in its own pass with the payload's bound hasher
(lmserde.frame_checksum): the wrapper then hashes nothing itself, and a serde that hashes the
wrong bytes, part of them or none can never make a damaged object a hit."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from lmserde import (
    AsyncSerdeProcessor,
    MemoryLayoutDesc,
    MemoryObj,
    ObjectKey,
    SerdeSizeContract,
    as_byte_tensor,
    frame_checksum,
    payload_hasher,
)
from lmserde.identity import IdentityDeserializer, IdentitySerializer
from lmserde.l1 import L1Manager
from lmserde.l2 import FSL2Adapter, SerdeL2AdapterWrapper, load_sync, store_sync
from lmserde.l2.serde import stored_frame
from lmserde.l2.serde.stored_frame import FRAME_HEADER_BYTES, parse_header
from lmserde.testing import adapter_key

pytestmark = pytest.mark.skipif(frame_checksum.checksum_kernel() is None,
                                reason="lmserde was built without its checksum kernel")

THREE_SEGMENTS = MemoryLayoutDesc([[9 << 20]], [torch.uint8])  # 9 MiB: 3 checksum segments
SMALL = MemoryLayoutDesc([[4, 1000]], [torch.float16])


class _Counter:
    def __init__(self, real: Any) -> None:
        self.real, self.calls = real, 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return self.real(*args, **kwargs)


@pytest.fixture
def wrapper_hashing(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, _Counter]]:
    """Counts the wrapper's own payload hashing (in the stored-object frame's module)."""
    counters = {name: _Counter(getattr(stored_frame, name))
                for name in ("payload_checksum", "start_payload_checksum", "xxh3_of_tensor")}
    for name, counter in counters.items():
        monkeypatch.setattr(stored_frame, name, counter)
    yield counters


def _wrapper(tmp_path: Path, l1: L1Manager, serializer: Any = None,
             deserializer: Any = None) -> SerdeL2AdapterWrapper:
    processor = AsyncSerdeProcessor(serializer or IdentitySerializer(),
                                    deserializer or IdentityDeserializer(), serde_type="identity")
    return SerdeL2AdapterWrapper(FSL2Adapter(tmp_path), processor, l1,
                                 size_contract=SerdeSizeContract.EXACT)


def _store(wrapper: Any, l1: L1Manager, keys: list[ObjectKey], layout: MemoryLayoutDesc
           ) -> list[torch.Tensor]:
    objects, expected = [], []
    for i, key in enumerate(keys):
        (_, obj), = l1.reserve_write([key], False, layout).values()
        obj.raw_data.copy_(torch.randint(0, 256, (obj.raw_data.numel(),), dtype=torch.uint8,
                                         generator=torch.Generator().manual_seed(i)))
        expected.append(obj.raw_data.clone())
        objects.append(obj)
    l1.finish_write_and_reserve_read(keys)
    assert store_sync(wrapper, keys, objects).is_successful()
    l1.finish_read(keys)
    l1.delete(keys)
    return expected


def _load(wrapper: Any, l1: L1Manager, key: ObjectKey, layout: MemoryLayoutDesc
          ) -> tuple[bool, torch.Tensor]:
    """(hit, what the destination holds afterwards)."""
    (_, dst), = l1.reserve_write([key], False, layout).values()
    dst.raw_data.fill_(0x5A)
    try:
        hit = load_sync(wrapper, [key], [dst]).test(0)
        return hit, dst.raw_data.clone()
    finally:
        l1.finish_write_and_delete([key])


def _damage(wrapper: SerdeL2AdapterWrapper, key: ObjectKey, offset: int) -> None:
    path = Path(wrapper.inner_adapter.path_of(key))  # type: ignore[attr-defined]
    data = bytearray(path.read_bytes())
    data[FRAME_HEADER_BYTES + offset] ^= 0x01
    path.write_bytes(bytes(data))


def _stored_checksum(wrapper: SerdeL2AdapterWrapper, key: ObjectKey) -> tuple[int | None, bytes]:
    stored = Path(wrapper.inner_adapter.path_of(key)).read_bytes()  # type: ignore[attr-defined]
    return parse_header(stored[:FRAME_HEADER_BYTES]).payload_checksum, stored[FRAME_HEADER_BYTES:]


@pytest.mark.parametrize("layout", [THREE_SEGMENTS, SMALL], ids=["9 MiB", "8 KB"])
def test_identity_hashes_in_its_copy_and_the_wrapper_hashes_nothing(
        tmp_path: Path, layout: MemoryLayoutDesc,
        wrapper_hashing: dict[str, _Counter]) -> None:
    l1 = L1Manager(1 << 27)
    with _wrapper(tmp_path, l1) as wrapper:
        keys = [adapter_key(i) for i in range(2)]
        expected = _store(wrapper, l1, keys, layout)
        for key, want in zip(keys, expected):
            checksum, payload = _stored_checksum(wrapper, key)
            assert payload == want.numpy().tobytes()
            assert checksum == frame_checksum.checksum_bytes(want)
            hit, loaded = _load(wrapper, l1, key, layout)
            assert hit and torch.equal(loaded, want)
    # a payload of one segment is checked before decoding, by the wrapper, from the cache
    small = layout is SMALL
    assert {name: c.calls for name, c in wrapper_hashing.items()} == {
        "payload_checksum": 0, "start_payload_checksum": 0, "xxh3_of_tensor": 2 if small else 0}


@pytest.mark.parametrize("offset", [0, 5 << 20, (9 << 20) - 1], ids=["first", "middle", "last"])
def test_a_damaged_payload_is_a_miss_with_a_zeroed_destination(tmp_path: Path,
                                                               offset: int) -> None:
    l1 = L1Manager(1 << 27)
    with _wrapper(tmp_path, l1) as wrapper:
        key = adapter_key(3)
        _store(wrapper, l1, [key], THREE_SEGMENTS)
        _damage(wrapper, key, offset)
        hit, loaded = _load(wrapper, l1, key, THREE_SEGMENTS)
        assert not hit and not loaded.any()  # decoded from damaged bytes: zeroed, never used
        assert wrapper.metrics()["rejections"] == {"checksum": 1}
        assert not Path(wrapper.inner_adapter.path_of(key)).exists()  # repaired
        _store(wrapper, l1, [key], THREE_SEGMENTS)  # and the next store writes it again
        assert _load(wrapper, l1, key, THREE_SEGMENTS)[0]


class _RemembersChecksums(IdentityDeserializer):
    """Tries to vouch for a load with the checksum the store computed (a plugin "saving a pass"):
    it feeds its hasher a pristine copy of the stored bytes instead of the bytes loaded."""

    reports_payload_checksum = True
    pristine: dict[bytes, torch.Tensor] = {}

    def deserialize(self, src: MemoryObj, dst: MemoryObj, key: ObjectKey) -> None:
        out = as_byte_tensor(dst)
        out.copy_(as_byte_tensor(src)[:out.numel()])
        hasher = payload_hasher(src)
        if hasher is not None:
            hasher.update(self.pristine[key.chunk_hash])


class _PartialHasher(IdentityDeserializer):
    """Hashes all but the last byte (an honest hash of too little)."""

    reports_payload_checksum = True

    def deserialize(self, src: MemoryObj, dst: MemoryObj, key: ObjectKey) -> None:
        out, data = as_byte_tensor(dst), as_byte_tensor(src)
        n = out.numel()
        out.copy_(data[:n])
        hasher = payload_hasher(src)
        if hasher is not None:
            hasher.update(data[:n - 1])


class _Silent(IdentityDeserializer):
    """Says it hashes, never does."""

    reports_payload_checksum = True

    def deserialize(self, src: MemoryObj, dst: MemoryObj, key: ObjectKey) -> None:
        as_byte_tensor(dst).copy_(as_byte_tensor(src)[:dst.get_size()])


def test_a_serde_cannot_vouch_with_a_checksum_of_other_bytes(tmp_path: Path) -> None:
    """The hasher accepts only the payload's own memory: hashing a pristine copy breaks it, the
    wrapper hashes the loaded bytes itself, and the damaged object is a miss."""
    l1 = L1Manager(1 << 27)
    with _wrapper(tmp_path, l1, deserializer=_RemembersChecksums()) as wrapper:
        key = adapter_key(4)
        _store(wrapper, l1, [key], THREE_SEGMENTS)
        stored = Path(wrapper.inner_adapter.path_of(key)).read_bytes()  # type: ignore[attr-defined]
        _RemembersChecksums.pristine[key.chunk_hash] = torch.frombuffer(
            bytearray(stored[FRAME_HEADER_BYTES:]), dtype=torch.uint8)
        _damage(wrapper, key, 5 << 20)
        hit, loaded = _load(wrapper, l1, key, THREE_SEGMENTS)
        assert not hit and not loaded.any()
        assert wrapper.metrics()["rejections"] == {"checksum": 1}


@pytest.mark.parametrize("deserializer", [_PartialHasher, _Silent], ids=["partial", "silent"])
def test_without_a_report_of_the_whole_payload_the_wrapper_hashes(
        tmp_path: Path, deserializer: type, wrapper_hashing: dict[str, _Counter]) -> None:
    l1 = L1Manager(1 << 27)
    with _wrapper(tmp_path, l1, deserializer=deserializer()) as wrapper:
        good, bad = adapter_key(5), adapter_key(6)
        expected = _store(wrapper, l1, [good, bad], THREE_SEGMENTS)
        _damage(wrapper, bad, 7 << 20)
        hit, loaded = _load(wrapper, l1, good, THREE_SEGMENTS)
        assert hit and torch.equal(loaded, expected[0])
        hit, loaded = _load(wrapper, l1, bad, THREE_SEGMENTS)
        assert not hit and not loaded.any()
        assert wrapper.metrics()["rejections"] == {"checksum": 1}
    assert wrapper_hashing["payload_checksum"].calls == 2  # after each decode, by the wrapper


class _SomeKeys(IdentitySerializer):
    """Hashes its copy for keys whose chunk hash ends with an even byte only."""

    def serialize(self, src: MemoryObj, dst: MemoryObj, key: ObjectKey) -> int:
        data = as_byte_tensor(src)
        n = data.numel()
        hasher = payload_hasher(dst)
        if key.chunk_hash[-1] % 2 == 0 and hasher is not None:
            hasher.copy_in(data)
        else:
            as_byte_tensor(dst)[:n].copy_(data)
        return n


class _OverHashing(IdentitySerializer):
    """Hashes its whole copy but says it wrote one byte less (an UPPER_BOUND serde may write
    less than its estimate): its hash covers more than the output."""

    def serialize(self, src: MemoryObj, dst: MemoryObj, key: ObjectKey) -> int:
        return super().serialize(src, dst, key) - 1


def test_a_hash_of_more_than_the_output_is_not_used(tmp_path: Path,
                                                     wrapper_hashing: dict[str, _Counter]) -> None:
    l1 = L1Manager(1 << 27)
    processor = AsyncSerdeProcessor(_OverHashing(), IdentityDeserializer(), serde_type="identity")
    with SerdeL2AdapterWrapper(FSL2Adapter(tmp_path), processor, l1,
                               size_contract=SerdeSizeContract.UPPER_BOUND) as wrapper:
        key = adapter_key(12)
        expected = _store(wrapper, l1, [key], THREE_SEGMENTS)
        assert wrapper_hashing["start_payload_checksum"].calls == 1  # hashed by the wrapper
        checksum, payload = _stored_checksum(wrapper, key)
        assert payload == expected[0][:-1].numpy().tobytes()
        assert checksum == frame_checksum.checksum_bytes(expected[0][:-1])


def test_a_batch_with_reported_and_unreported_payloads(tmp_path: Path,
                                                       wrapper_hashing: dict[str, _Counter]
                                                       ) -> None:
    """The reported payloads keep their checksum, the others are hashed while ``fs`` writes
    them (its head-last path), and every object loads back."""
    l1 = L1Manager(1 << 28)
    with _wrapper(tmp_path, l1, serializer=_SomeKeys()) as wrapper:
        keys = [adapter_key(i) for i in range(8, 12)]
        assert {k.chunk_hash[-1] % 2 for k in keys} == {0, 1}
        expected = _store(wrapper, l1, keys, THREE_SEGMENTS)
        unreported = sum(k.chunk_hash[-1] % 2 for k in keys)
        assert wrapper_hashing["start_payload_checksum"].calls == unreported
        for key, want in zip(keys, expected):
            assert _stored_checksum(wrapper, key)[0] == frame_checksum.checksum_bytes(want)
            hit, loaded = _load(wrapper, l1, key, THREE_SEGMENTS)
            assert hit and torch.equal(loaded, want)
