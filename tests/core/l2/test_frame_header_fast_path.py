"""The frame header's C fast path (``lmserde._checksum_copy.write_header`` / ``accept_header``)
against the format's Python definition (:mod:`lmserde.l2.serde.stored_frame`): the same header
bytes for any key, length, checksum and layout; never accepting a header the Python checks
refuse (and accepting every header they accept, with the same payload checksum); and used by the
framer on plain CPU buffers."""

from __future__ import annotations

import struct
from typing import Any

import pytest
import torch
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st
from lmserde import MemoryLayoutDesc, ObjectKey
from lmserde.l2.serde import stored_frame
from lmserde.l2.serde.stored_frame import (
    FRAME_HEADER_BYTES,
    FrameRejected,
    ObjectFramer,
    build_header,
    check_header,
    config_fingerprint,
    layout_field,
    parse_header,
)
from lmserde.memory import MemoryFormat, TensorMemoryObj

KERNEL = stored_frame._HEADER_KERNEL
pytestmark = pytest.mark.skipif(KERNEL is None,
                                reason="lmserde was built without its checksum kernel")

CONFIG_ID = config_fingerprint({"type": "fp8", "format_version": 1, "options": {}})
KV = MemoryLayoutDesc([[2, 32, 256, 8, 128]], [torch.bfloat16])
LONG = MemoryLayoutDesc([[2, 3, 5, 7, 11, 13, 17]] * 3, [torch.float16] * 3)  # a hashed field

_text = st.text(st.characters(blacklist_characters="@/\\\x00", blacklist_categories=("Cs",)),
                max_size=20)
keys = st.builds(
    ObjectKey,
    chunk_hash=st.binary(max_size=48),
    model_name=st.text(st.characters(blacklist_characters="@"), max_size=30),
    kv_rank=st.integers(-(2**63), 2**63 - 1),
    object_group_id=st.integers(0, 2**64 - 1),
    cache_salt=_text,
)
layouts = st.sampled_from([KV, LONG, MemoryLayoutDesc([[0]], [torch.uint8])])
checksums = st.one_of(st.none(), st.integers(0, 2**64 - 1))


def _area() -> torch.Tensor:
    return torch.full((FRAME_HEADER_BYTES,), 0xA5, dtype=torch.uint8)


def _kernel_header(length: int, checksum: int | None, key: ObjectKey,
                   layout: MemoryLayoutDesc) -> bytes:
    area = _area()
    field, inline = layout_field(layout)
    KERNEL.write_header(area.data_ptr(), length, checksum, CONFIG_ID, key.chunk_hash,
                        key.model_name, key.kv_rank, key.object_group_id, key.cache_salt,
                        field, inline)
    return bytes(area.tolist())


def _python_verdict(header: bytes, stored: int, bound: int, config_id: int, key: ObjectKey,
                    layout: MemoryLayoutDesc | None) -> Any:
    """The Python checks' payload checksum (``None``: none), or ``False`` when they refuse."""
    try:
        parsed = parse_header(header)
        check_header(parsed, stored_payload_bytes=stored, payload_bound=bound,
                     config_id=config_id, key=key,
                     layout_bytes=None if layout is None else layout_field(layout))
    except FrameRejected:
        return False
    return parsed.payload_checksum


def _kernel_verdict(header: bytes, stored: int, bound: int, config_id: int, key: ObjectKey,
                    layout: MemoryLayoutDesc | None) -> Any:
    area = torch.frombuffer(bytearray(header), dtype=torch.uint8)
    field, inline = layout_field(layout) if layout is not None else (None, False)
    return KERNEL.accept_header(area.data_ptr(), stored, bound, config_id, key.chunk_hash,
                                key.model_name, key.kv_rank, key.object_group_id,
                                key.cache_salt, field, inline)


@settings(max_examples=300, deadline=None)
@given(key=keys, length=st.integers(0, 2**64 - 1), checksum=checksums, layout=layouts)
def test_the_fast_path_writes_the_definitions_bytes(key: ObjectKey, length: int,
                                                    checksum: int | None,
                                                    layout: MemoryLayoutDesc) -> None:
    expected = build_header(payload_length=length, checksum=checksum, config_id=CONFIG_ID,
                            key=key, layout_bytes=layout_field(layout))
    assert _kernel_header(length, checksum, key, layout) == expected


def test_lone_surrogates_in_names_are_packed_as_the_definition_packs_them() -> None:
    key = ObjectKey(b"h", "model-\udcff", 0, 0, "salt-\ud800")
    assert _kernel_header(5, 7, key, KV) == build_header(
        payload_length=5, checksum=7, config_id=CONFIG_ID, key=key, layout_bytes=layout_field(KV))


@settings(max_examples=400, deadline=None)
@given(key=keys, other=keys, length=st.integers(0, 1 << 40), checksum=checksums,
       layout=layouts, read_layout=st.one_of(st.none(), layouts),
       flips=st.lists(st.tuples(st.integers(0, FRAME_HEADER_BYTES - 1), st.integers(1, 255)),
                      max_size=3),
       same_key=st.booleans(), stored_delta=st.sampled_from([0, 0, 0, -1, 1]),
       bound_delta=st.sampled_from([0, 0, 5, -1]), same_config=st.booleans(),
       reseal=st.booleans())
def test_the_fast_path_accepts_exactly_what_the_python_checks_accept(
        key: ObjectKey, other: ObjectKey, length: int, checksum: int | None,
        layout: MemoryLayoutDesc, read_layout: MemoryLayoutDesc | None,
        flips: list[tuple[int, int]], same_key: bool, stored_delta: int, bound_delta: int,
        same_config: bool, reseal: bool) -> None:
    """Headers damaged anywhere (with the header checksum made to match again, so that the
    checks after it are reached), read with another key, config, length, bound or layout (or
    none): the fast path's verdict is the Python checks' verdict, and it never raises."""
    header = bytearray(_kernel_header(length, checksum, key, layout))
    for offset, mask in flips:
        header[offset] ^= mask
    if reseal:
        header[60:] = (xxhash.xxh3_64_intdigest(bytes(header[:60])) & 0xFFFFFFFF).to_bytes(
            4, "little")
    read_key = key if same_key else other
    stored = max(0, length + stored_delta)
    bound = max(0, length + bound_delta)
    config_id = CONFIG_ID if same_config else CONFIG_ID ^ 1
    args = (bytes(header), stored, bound, config_id, read_key, read_layout)
    assert _kernel_verdict(*args) == _python_verdict(*args)


def test_a_key_field_struct_refuses_takes_the_python_path_and_its_error() -> None:
    """A kv_rank beyond 64 bits: the fast path steps aside and ``struct`` raises as before."""
    key = ObjectKey(b"h", "m", 2**70, 0, "")
    framer = ObjectFramer({"type": "identity"}, checksum=True)
    raw = torch.zeros(FRAME_HEADER_BYTES + 4, dtype=torch.uint8)
    buf = TensorMemoryObj.over(raw, MemoryLayoutDesc([[raw.numel()]], [torch.uint8]),
                               fmt=MemoryFormat.BINARY_BUFFER)
    with pytest.raises(struct.error):
        framer.seal(buf, 4, key, KV, checksum=1)


class _Recording:
    """The kernel, with a record of the header calls made through it."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def write_header(self, *args: Any) -> Any:
        self.calls.append("write")
        return KERNEL.write_header(*args)

    def accept_header(self, *args: Any) -> Any:
        self.calls.append("accept")
        return KERNEL.accept_header(*args)


def test_the_framer_writes_and_accepts_cpu_headers_through_the_fast_path(
        monkeypatch: pytest.MonkeyPatch) -> None:
    recording = _Recording()
    monkeypatch.setattr(stored_frame, "_HEADER_KERNEL", recording)
    key = ObjectKey(b"\x02" * 16, "model", 3, 1, "tenant")
    framer = ObjectFramer({"type": "identity"}, checksum=True)
    raw = torch.zeros(FRAME_HEADER_BYTES + 100, dtype=torch.uint8)
    buf = TensorMemoryObj.over(raw, MemoryLayoutDesc([[raw.numel()]], [torch.uint8]),
                               fmt=MemoryFormat.BINARY_BUFFER)
    raw[FRAME_HEADER_BYTES:] = 7
    framer.seal(buf, 100, key, KV)
    assert recording.calls == ["write"]
    assert bytes(raw[:FRAME_HEADER_BYTES].tolist()) == build_header(
        payload_length=100, checksum=parse_header(bytes(raw[:64].tolist())).payload_checksum,
        config_id=framer.config_id, key=key, layout_bytes=layout_field(KV))
    payload = framer.open(buf, key, KV, 100)
    assert recording.calls == ["write", "accept"]
    assert payload.raw_data.eq(7).all()
    with pytest.raises(FrameRejected) as refused:  # refused by the fast path, named by Python
        framer.open(buf, ObjectKey(b"\x02" * 16, "model", 3, 1, "other"), KV, 100)
    assert refused.value.reason == "key"
    assert recording.calls == ["write", "accept", "accept"]


@pytest.mark.parametrize("layout", [KV, LONG], ids=["inline layout", "hashed layout"])
@pytest.mark.parametrize("checksum", [None, 0x0123456789ABCDEF], ids=["no checksum", "checksum"])
def test_every_changed_byte_of_a_resealed_header_gets_the_python_verdict(
        layout: MemoryLayoutDesc, checksum: int | None) -> None:
    """Each of the 60 covered bytes changed (three ways), the header checksum made to match
    again: every check after the header checksum is reached by some change, and the fast path
    agrees with the Python checks on each (for instance, a changed reserved byte or version is
    refused by both; a changed byte of a hashed layout's padding is accepted by both)."""
    key = ObjectKey(b"\x05" * 32, "model", 9, 2, "tenant")
    sealed = _kernel_header(1000, checksum, key, layout)
    for offset in range(60):
        for mask in (0x01, 0x80, 0xFF):
            header = bytearray(sealed)
            header[offset] ^= mask
            header[60:] = (xxhash.xxh3_64_intdigest(bytes(header[:60])) & 0xFFFFFFFF).to_bytes(
                4, "little")
            for read_layout in (layout, None):
                args = (bytes(header), 1000, 4096, CONFIG_ID, key, read_layout)
                assert _kernel_verdict(*args) == _python_verdict(*args), (offset, mask)
