"""The stored-object frame: header layout, every reject reason, and a fuzzed parser; each test
runs with the header's C fast path and with the Python codec alone."""

from __future__ import annotations

import struct
import threading
import time
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from lmserde import MemoryLayoutDesc, ObjectKey
from lmserde.l2.serde import stored_frame
from lmserde.l2.serde.stored_frame import (
    FRAME_HEADER_BYTES,
    FRAME_MAGIC,
    FrameRejected,
    ObjectFramer,
    PendingHeader,
    config_fingerprint,
    decode_layout,
    encode_layout,
    key_fingerprint,
    parse_header,
)
from lmserde.memory import MemoryFormat, TensorMemoryObj
from stored_objects import stored_buffer

KEY = ObjectKey(b"\x01" * 8, "m/odel", 7, 0, "tenant")
KV = MemoryLayoutDesc([[2, 32, 256, 8, 128]], [torch.bfloat16])
CONFIG = {"type": "fp8", "format_version": 1, "options": {"fp8_dtype": "float8_e4m3fn"}}


@pytest.fixture(autouse=True, params=["fast path", "python"])
def header_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test with the C fast path (when built) and with the Python codec alone."""
    if request.param == "python":
        monkeypatch.setattr(stored_frame, "_HEADER_KERNEL", None)
    elif stored_frame._HEADER_KERNEL is None:
        pytest.skip("lmserde was built without its checksum kernel")
    return str(request.param)


def _buffer(payload: bytes, bound: int | None = None) -> TensorMemoryObj:
    bound = len(payload) if bound is None else bound
    raw = torch.zeros(FRAME_HEADER_BYTES + bound, dtype=torch.uint8)
    if payload:
        raw[FRAME_HEADER_BYTES:FRAME_HEADER_BYTES + len(payload)] = torch.frombuffer(
            bytearray(payload), dtype=torch.uint8)
    return TensorMemoryObj.over(raw, MemoryLayoutDesc([[raw.numel()]], [torch.uint8]),
                                fmt=MemoryFormat.BINARY_BUFFER)


def _sealed(payload: bytes, *, checksum: bool = True, key: ObjectKey = KEY,
            layout: MemoryLayoutDesc = KV, config: dict | None = None) -> bytes:
    framer = ObjectFramer(config or CONFIG, checksum=checksum)
    buf = _buffer(payload)
    framer.seal(buf, len(payload), key, layout)
    return bytes(buf.raw_data[:buf.get_size()].tolist())


def _open(stored: bytes, *, bound: int = 4096, key: ObjectKey = KEY,
          layout: MemoryLayoutDesc = KV, config: dict | None = None,
          checksum: bool = True) -> bytes:
    framer = ObjectFramer(config or CONFIG, checksum=checksum)
    buf = stored_buffer(stored)
    payload = framer.open(buf, key, layout, bound)
    return bytes(payload.raw_data[:payload.get_size()].tolist())


def _reason(stored: bytes, **kwargs: object) -> str:
    with pytest.raises(FrameRejected) as info:
        _open(stored, **kwargs)  # type: ignore[arg-type]
    return info.value.reason


def test_header_is_64_bytes_and_payload_follows() -> None:
    stored = _sealed(b"hello world")
    assert len(stored) == FRAME_HEADER_BYTES + 11
    assert stored[:4] == FRAME_MAGIC
    assert stored[FRAME_HEADER_BYTES:] == b"hello world"
    assert _open(stored) == b"hello world"


def test_empty_payload_round_trips() -> None:
    assert _open(_sealed(b"")) == b""


def test_layout_is_inline_for_kv_shapes_and_decodes() -> None:
    header = parse_header(_sealed(b"x"))
    assert header.layout_inline
    assert header.layout() == KV
    two = MemoryLayoutDesc([[4, 16, 2, 64], [4, 16, 2, 64]], [torch.bfloat16, torch.bfloat16])
    assert parse_header(_sealed(b"x", layout=two)).layout() == two


def test_a_long_layout_is_stored_as_a_digest_and_still_checked() -> None:
    wide = MemoryLayoutDesc([[1 << 40, 1 << 40, 1 << 40, 3]], [torch.float32])
    assert len(encode_layout(wide)) > 20
    stored = _sealed(b"abc", layout=wide)
    assert not parse_header(stored).layout_inline
    assert _open(stored, layout=wide) == b"abc"
    assert _reason(stored, layout=KV) == "layout"


@pytest.mark.parametrize("offset", range(0, FRAME_HEADER_BYTES))
def test_every_header_bit_flip_is_refused(offset: int) -> None:
    stored = bytearray(_sealed(b"payload-bytes"))
    stored[offset] ^= 0x10
    # a changed magic is no lmserde frame at all (perhaps an unframed writer's object), a
    # changed version byte another frame version (whose header may be laid out and checked
    # otherwise): not provably damage; any other changed byte fails the header's own checksum
    assert _reason(bytes(stored)) == ("foreign" if offset <= 4 else "format")


@pytest.mark.parametrize("offset", [0, 5, 12])
def test_payload_bit_flips_fail_the_checksum(offset: int) -> None:
    stored = bytearray(_sealed(b"payload-bytes"))
    stored[FRAME_HEADER_BYTES + offset] ^= 0x01
    assert _reason(bytes(stored)) == "checksum"


def test_truncations_and_appends_are_length_or_format_rejects() -> None:
    stored = _sealed(b"0123456789" * 10)
    assert _reason(stored[:FRAME_HEADER_BYTES - 1]) == "format"
    assert _reason(b"") == "format"
    assert _reason(stored[:-1]) == "length"
    assert _reason(stored[:FRAME_HEADER_BYTES]) == "length"
    assert _reason(stored + b"\0") == "length"


def test_payload_larger_than_the_bound_is_a_length_reject() -> None:
    assert _reason(_sealed(b"x" * 100), bound=99) == "length"


def test_another_key_config_or_layout_is_refused_by_reason() -> None:
    stored = _sealed(b"data")
    other_key = ObjectKey(b"\x01" * 8, "m/odel", 7, 0, "tenant-2")
    assert _reason(stored, key=other_key) == "key"
    e5m2 = {**CONFIG, "options": {"fp8_dtype": "float8_e5m2"}}
    assert _reason(stored, config=e5m2) == "config"
    assert _reason(stored, layout=MemoryLayoutDesc([[2, 32, 256, 8, 64]], [torch.bfloat16])) == \
        "layout"


def test_a_frame_without_checksum_is_read_by_the_same_configuration() -> None:
    """An authenticating serde's frames carry no payload checksum; the flag is covered by the
    header checksum, so clearing it is a format reject, not a skipped check. A configuration
    that always writes the checksum refuses a frame without one (issue 29: a frame that omits
    a protection its config requires), even under a recomputed header checksum."""
    stored = _sealed(b"data", checksum=False)
    assert parse_header(stored).payload_checksum is None
    assert _open(stored, checksum=False) == b"data"
    assert _reason(stored, checksum=True) == "checksum"
    with_sum = bytearray(_sealed(b"data", checksum=True))
    with_sum[5] &= ~0x01  # clear the checksum flag: the header checksum no longer matches
    assert _reason(bytes(with_sum)) == "format"


def test_foreign_bytes_are_foreign_rejects() -> None:
    assert _reason(b"\0" * 200) == "foreign"
    assert _reason(bytes(range(256)) * 2) == "foreign"


def test_other_frame_versions_and_flags_are_foreign_not_damage() -> None:
    """A frame a newer (or older) lmserde wrote, with a valid header checksum, is another
    reader's object: refused as ``foreign`` (kept), never as damage."""
    from lmserde.l2.serde.stored_frame import DAMAGE_REASONS, NOT_MINE_REASONS, xxh3_64

    def resealed(offset: int, value: int) -> bytes:
        out = bytearray(_sealed(b"payload-bytes"))
        out[offset] = value
        out[60:64] = (xxh3_64(bytes(out[:60])) & 0xFFFFFFFF).to_bytes(4, "little")
        return bytes(out)

    assert _reason(resealed(4, 2)) == "foreign"  # frame version 2
    unsealed = bytearray(_sealed(b"payload-bytes"))
    unsealed[4] = 2
    unsealed[60:64] = bytes(4)  # a future version with another header checksum (or none)
    assert _reason(bytes(unsealed)) == "foreign"
    assert _reason(resealed(5, 0x81)) == "foreign"  # an unknown flag
    assert _reason(resealed(6, 1)) == "foreign"  # reserved bytes in use
    assert "foreign" in NOT_MINE_REASONS and "format" in DAMAGE_REASONS


def test_key_fingerprint_separates_fields() -> None:
    a = ObjectKey(b"ab", "c", 0, 0, "")
    b = ObjectKey(b"a", "bc", 0, 0, "")
    assert key_fingerprint(a) != key_fingerprint(b)
    assert key_fingerprint(ObjectKey(b"a", "m", 1, 0, "")) != key_fingerprint(
        ObjectKey(b"a", "m", 1, 1, ""))
    lone = ObjectKey(b"a", "m", 1, 0, "\udc80")  # lone surrogates are valid Python str
    assert isinstance(key_fingerprint(lone), int)


def test_config_fingerprint_is_canonical() -> None:
    assert config_fingerprint({"a": 1, "b": [1, 2]}) == config_fingerprint({"b": [1, 2], "a": 1})
    assert config_fingerprint({"a": 1}) != config_fingerprint({"a": 2})


_dims = st.lists(st.integers(0, 1 << 62), min_size=0, max_size=6)
_dtypes = st.sampled_from([torch.uint8, torch.bfloat16, torch.float16, torch.float32,
                           torch.float8_e4m3fn, torch.int64])


@given(st.lists(st.tuples(_dims, _dtypes), min_size=1, max_size=4))
def test_layout_encoding_round_trips(groups: list[tuple[list[int], torch.dtype]]) -> None:
    layout = MemoryLayoutDesc([g[0] for g in groups], [g[1] for g in groups])
    assert decode_layout(encode_layout(layout)) == layout


@settings(max_examples=400)
@given(st.binary(min_size=0, max_size=160))
def test_parser_never_accepts_or_crashes_on_random_bytes(data: bytes) -> None:
    with pytest.raises(FrameRejected):
        _open(data)


@settings(max_examples=300)
@given(st.binary(min_size=1, max_size=64), st.integers(0, 10_000), st.integers(0, 7))
def test_any_single_bit_flip_of_a_frame_is_refused(payload: bytes, where: int, bit: int) -> None:
    stored = bytearray(_sealed(payload))
    stored[where % len(stored)] ^= 1 << bit
    with pytest.raises(FrameRejected):
        _open(bytes(stored))


@settings(max_examples=200)
@given(st.binary(min_size=FRAME_HEADER_BYTES, max_size=FRAME_HEADER_BYTES))
def test_parse_header_raises_only_frame_rejected(header: bytes) -> None:
    try:
        parse_header(header)
    except FrameRejected:
        return
    # a random header passing its own 32-bit checksum is possible but must still parse cleanly
    assert struct.unpack_from("<4s", header)[0] == FRAME_MAGIC


def test_long_payloads_are_checksummed_by_segments_as_documented() -> None:
    import xxhash
    from lmserde.l2.serde.stored_frame import CHECKSUM_SEGMENT_BYTES, payload_checksum

    seg = CHECKSUM_SEGMENT_BYTES
    data = torch.randint(0, 256, (2 * seg + 17,), dtype=torch.uint8, generator=torch.Generator()
                         .manual_seed(5))
    digests = [xxhash.xxh3_64_intdigest(data[i:i + seg].numpy().tobytes())
               for i in range(0, data.numel(), seg)]
    assert payload_checksum(data) == xxhash.xxh3_64_intdigest(struct.pack("<3Q", *digests))
    assert payload_checksum(data[:seg]) == xxhash.xxh3_64_intdigest(data[:seg].numpy().tobytes())
    for where in (0, seg - 1, seg, 2 * seg + 16):  # each segment, both sides of a boundary
        flipped = data.clone()
        flipped[where] ^= 1
        assert payload_checksum(flipped) != payload_checksum(data)


@settings(max_examples=25, deadline=None)
@given(length=st.sampled_from([0, 1, 63, 4096, (4 << 20) - 1, 4 << 20, (4 << 20) + 1, 9 << 20]),
       seed=st.integers(0, 2**32 - 1))
def test_a_deferred_seal_writes_the_header_a_plain_seal_writes(length: int, seed: int) -> None:
    """``seal_deferred`` (the head-last store) hashes on the checksum threads and writes the
    header only in ``finish_head()``: zero until then, identical to ``seal``'s afterwards."""
    data = torch.randint(0, 256, (length,), dtype=torch.uint8,
                         generator=torch.Generator().manual_seed(seed))
    framer = ObjectFramer(CONFIG, checksum=True)
    plain, deferred = _buffer(b"", length), _buffer(b"", length)
    for buf in (plain, deferred):
        buf.raw_data[FRAME_HEADER_BYTES:].copy_(data)
    framer.seal(deferred, length, KEY, KV)  # a stale, valid header: seal_deferred must clear it
    framer.seal(plain, length, KEY, KV)
    head = framer.seal_deferred(deferred, length, KEY, KV)
    assert head.head_bytes == FRAME_HEADER_BYTES
    assert deferred.get_size() == FRAME_HEADER_BYTES + length
    assert int(deferred.raw_data[:FRAME_HEADER_BYTES].count_nonzero()) == 0
    head.finish_head()
    assert torch.equal(deferred.raw_data, plain.raw_data)


class _Work:
    """A ``begin`` for :class:`PendingHeader` that counts how often the work was started."""

    def __init__(self, value: int = 7) -> None:
        self.begun, self.waited, self.value = 0, 0, value

    def __call__(self) -> Any:
        self.begun += 1
        time.sleep(0.01)  # a start that takes a while: concurrent callers must still share it

        def wait() -> int:
            self.waited += 1
            return self.value
        return wait


def test_a_pending_header_starts_its_work_once_at_start_or_finish() -> None:
    written: list[int] = []
    work = _Work()
    head = PendingHeader(work, written.append)
    assert work.begun == 0  # nothing runs until the store path (or the adapter) asks
    threads = [threading.Thread(target=head.start) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert work.begun == 1
    head.finish_head()
    assert work.begun == 1 and written == [7]
    lazy = _Work(9)
    late = PendingHeader(lazy, written.append)
    late.finish_head()  # an adapter that finishes before the store path called start()
    assert lazy.begun == 1 and written == [7, 9]


def test_settling_a_pending_header_waits_for_started_work_and_abandons_the_rest() -> None:
    started, idle = _Work(), _Work()
    running = PendingHeader(started, lambda value: None)
    running.start()
    running.settle()
    assert started.waited == 1  # the checksum threads are done with the buffer
    abandoned = PendingHeader(idle, lambda value: pytest.fail("an abandoned head was written"))
    abandoned.settle()
    abandoned.start()
    assert idle.begun == 0  # nothing ever read the buffer
    with pytest.raises(RuntimeError, match="gave this object up"):
        abandoned.finish_head()  # an adapter must not publish it


def test_work_that_cannot_start_fails_the_head_not_the_caller() -> None:
    """``start()`` runs on the store path right after the inner adapter took the object: work
    that cannot start (checksum threads shut down) must not raise there, or the task would be
    failed and its buffers released while the adapter still writes them; ``finish_head()``
    raises instead, so the adapter does not publish the object."""
    calls = []

    def broken() -> Any:
        calls.append(1)
        raise RuntimeError("cannot schedule new futures after shutdown")

    head = PendingHeader(broken, lambda value: pytest.fail("a header was written"))
    head.start()
    head.start()
    with pytest.raises(RuntimeError, match="after shutdown"):
        head.finish_head()
    head.settle()
    assert calls == [1]


def test_a_deferred_seal_needs_a_checksummed_frame() -> None:
    with pytest.raises(ValueError, match="no payload checksum"):
        ObjectFramer(CONFIG, checksum=False).seal_deferred(_buffer(b"x"), 1, KEY, KV)


@pytest.mark.parametrize("length", [0, 5, 4 << 20, (4 << 20) + 1, (12 << 20) - 3])
def test_every_way_of_hashing_gives_the_documented_checksum(length: int) -> None:
    """Inline or started in the background (segments in parallel): the value the format
    defines, computed here independently with ``xxhash`` over copies of the bytes."""
    import xxhash
    from lmserde.l2.serde.payload_checksum import (
        CHECKSUM_SEGMENT_BYTES,
        payload_checksum,
        start_payload_checksum,
    )

    data = torch.randint(0, 256, (length,), dtype=torch.uint8,
                         generator=torch.Generator().manual_seed(length))
    raw = bytes(data.numpy().tobytes())
    if length <= CHECKSUM_SEGMENT_BYTES:
        expected = xxhash.xxh3_64_intdigest(raw)
    else:
        digests = [xxhash.xxh3_64_intdigest(raw[i:i + CHECKSUM_SEGMENT_BYTES])
                   for i in range(0, length, CHECKSUM_SEGMENT_BYTES)]
        expected = xxhash.xxh3_64_intdigest(struct.pack(f"<{len(digests)}Q", *digests))
    assert payload_checksum(data) == expected
    assert start_payload_checksum(data)() == expected
