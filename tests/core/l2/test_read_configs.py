"""``ConfigReaders``: the serde configurations a load path decodes, one picked per stored object."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from lmserde import AsyncSerdeProcessor, MemoryLayoutDesc, ObjectKey
from lmserde.identity import IdentityDeserializer, IdentitySerializer
from lmserde.l2.serde.read_configs import (
    ConfigReader,
    ConfigReaders,
    config_reader,
    framer_for,
    read_also_readers,
)
from lmserde.l2.serde.serde_shape import SerdeShape
from lmserde.l2.serde.stored_frame import (
    FRAME_HEADER_BYTES,
    FrameRejected,
    stored_config_fingerprint,
)
from lmserde.memory import MemoryFormat, TensorMemoryObj
from lmserde.spec import SerdeSizeContract

LAYOUT = MemoryLayoutDesc([[8, 16]], [torch.bfloat16])
KEY = ObjectKey(chunk_hash=b"k" * 8, model_name="m", kv_rank=0, object_group_id=0,
                cache_salt="t")


def _processor(name: str) -> AsyncSerdeProcessor:
    return AsyncSerdeProcessor(IdentitySerializer(), IdentityDeserializer(), 1, serde_type=name)


@pytest.fixture
def processors() -> Iterator[list[AsyncSerdeProcessor]]:
    made = [_processor(name) for name in ("a", "b", "c", "d")]
    yield made
    for processor in made:
        processor.close()


def _reader(processor: AsyncSerdeProcessor) -> ConfigReader:
    name = processor.serde_type
    return config_reader(processor, name, framer_for(processor, name))


def _framed(reader: ConfigReader, payload: bytes) -> TensorMemoryObj:
    """An object as ``reader``'s config stores it: frame header, then ``payload``."""
    size = FRAME_HEADER_BYTES + len(payload)
    buf = TensorMemoryObj.allocate(MemoryLayoutDesc([[size]], [torch.uint8]),
                                   fmt=MemoryFormat.BINARY_BUFFER)
    buf.raw_data[FRAME_HEADER_BYTES:size].copy_(torch.frombuffer(bytearray(payload),
                                                                 dtype=torch.uint8))
    assert reader.framer is not None
    reader.framer.seal(buf, len(payload), KEY, LAYOUT)
    return buf


def test_each_object_is_opened_by_the_config_its_frame_names(
        processors: list[AsyncSerdeProcessor]) -> None:
    a, b, c = (_reader(p) for p in processors[:3])
    readers = ConfigReaders([a, b])
    payload = bytes(range(256))[:LAYOUT.nbytes // 2] * 2
    for index, reader in enumerate((a, b)):
        stored = _framed(reader, payload)
        assert stored_config_fingerprint(stored) == reader.config_id
        got, view, confirm = readers.open_deferred(stored, KEY, LAYOUT)
        confirm()
        assert got == index and bytes(view.raw_data.numpy()) == payload
    with pytest.raises(FrameRejected) as refused:  # a config not listed: not mine
        readers.open_deferred(_framed(c, payload), KEY, LAYOUT)
    assert refused.value.reason == "config"


def test_a_header_that_does_not_parse_names_no_config(processors: list[AsyncSerdeProcessor]
                                                      ) -> None:
    stored = _framed(_reader(processors[0]), b"\0" * LAYOUT.nbytes)
    stored.raw_data[30] ^= 1  # inside the config fingerprint: the header checksum fails
    assert stored_config_fingerprint(stored) is None


def test_the_same_config_twice_or_an_unframed_reader_among_several_is_refused(
        processors: list[AsyncSerdeProcessor]) -> None:
    a = _reader(processors[0])
    with pytest.raises(ValueError, match="listed twice"):
        ConfigReaders([a, _reader(_processor_named(processors[1], "a"))])
    unframed = config_reader(processors[1], "b", None)
    with pytest.raises(ValueError, match="framed objects"):
        ConfigReaders([a, unframed])
    with pytest.raises(ValueError, match="at least one"):
        ConfigReaders([])
    assert len(ConfigReaders([unframed])) == 1  # one unframed reader: the unframed wrapper
    with pytest.raises(ValueError, match="current serde config"):
        read_also_readers([(processors[2], "a", SerdeSizeContract.EXACT)],
                          _reader(_processor_named(processors[2], "a")))


def _processor_named(processor: AsyncSerdeProcessor, name: str) -> AsyncSerdeProcessor:
    processor.serde_type = name
    return processor


def test_repeated_labels_are_told_apart(processors: list[AsyncSerdeProcessor]) -> None:
    primary = _reader(processors[0])
    processors[2].set_config({"type": "b", "options": {"level": 2}})
    readers = read_also_readers([(processors[1], "b", SerdeSizeContract.EXACT),
                                 (processors[2], "b", SerdeSizeContract.EXACT)], primary)
    assert readers[0].label == "b" and readers[1].label.startswith("b@")


class _NoBound:
    """A processor whose estimate raises (a plugin that cannot size this layout)."""

    def input_slot_mapping(self) -> None:
        return None

    def output_slot_mapping(self) -> None:
        return None

    def estimate_serialized_size(self, layout: Any) -> int:
        raise SystemExit("no bound")  # whatever plugin code raises is contained


def test_the_load_bound_is_the_largest_and_a_raising_estimate_is_left_out(
        processors: list[AsyncSerdeProcessor], caplog: pytest.LogCaptureFixture) -> None:
    primary = _reader(processors[0])
    half = _reader(processors[1])
    wide = ConfigReader("wide", processors[2], framer_for(processors[2], "c"),
                        _Scaled(processors[2], 3), False)
    broken = ConfigReader("broken", processors[2], framer_for(processors[3], "d"),
                          SerdeShape(_NoBound(), "broken", None), False)  # type: ignore[arg-type]
    readers = ConfigReaders([primary, half, wide, broken])
    with caplog.at_level(logging.WARNING, logger="lmserde.l2.serde.wrapper"):
        assert readers.load_bound(LAYOUT) == 3 * LAYOUT.nbytes
        assert readers.load_bound(LAYOUT) == 3 * LAYOUT.nbytes
    assert sum("'broken' has no bound" in r.getMessage() for r in caplog.records) == 1


class _Scaled(SerdeShape):
    """A shape whose bound is ``factor`` times the layout's bytes (a serde that grows data)."""

    def __init__(self, processor: AsyncSerdeProcessor, factor: int) -> None:
        super().__init__(processor, "scaled", None)
        self._factor = factor

    def payload_bound(self, layout: MemoryLayoutDesc) -> int:
        return self._factor * layout.nbytes
