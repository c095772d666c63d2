"""Issue #13, cases 1 and 5: whatever a serde raises or returns, the processor fails closed.

A ``BaseException`` that is not an ``Exception`` (``SystemExit``, ``asyncio.CancelledError``,
``GeneratorExit``, a ``KeyboardInterrupt`` raised on a worker thread) fails its item, never the
whole worker, and a task is ``ok`` only when every item returned normally. A serialize return
that is not a byte count within the destination fails the item with an error naming the serde.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
import torch
from lmserde import (
    AsyncSerdeProcessor,
    Deserializer,
    MemoryLayoutDesc,
    ObjectKey,
    Serializer,
    TensorMemoryObj,
    as_byte_tensor,
)
from lmserde.identity import IdentityDeserializer, IdentitySerializer
from lmserde.memory import MemoryFormat
from lmserde.processor import SerializedSizeError
from lmserde.testing import wait_for_result

KEYS = [ObjectKey(bytes([i]) * 8, "model", 0) for i in range(3)]
LAYOUT = MemoryLayoutDesc([[64]], [torch.uint8])

RAISED = [
    pytest.param(SystemExit(3), id="SystemExit"),
    pytest.param(asyncio.CancelledError(), id="CancelledError"),
    pytest.param(KeyboardInterrupt(), id="KeyboardInterrupt-on-worker"),
    pytest.param(GeneratorExit(), id="GeneratorExit"),
]


def _bytes_obj(fill: int, n: int = 64) -> TensorMemoryObj:
    raw = torch.full((n,), fill, dtype=torch.uint8)
    return TensorMemoryObj.over(raw, MemoryLayoutDesc([[n]], [torch.uint8]),
                                fmt=MemoryFormat.BINARY_BUFFER)


class RaisingOnCall(Serializer):
    """Copies like identity, except that call number ``on`` raises ``exc``."""

    def __init__(self, exc: BaseException, on: int) -> None:
        self.exc, self.on, self.calls = exc, on, 0
        self._copy = IdentitySerializer()

    def serialize(self, src: Any, dst: Any, key: ObjectKey) -> int:
        self.calls += 1
        if self.calls == self.on:
            raise self.exc
        return self._copy.serialize(src, dst, key)

    def estimate_serialized_size(self, layout_desc: MemoryLayoutDesc) -> int:
        return self._copy.estimate_serialized_size(layout_desc)


class PartialThenRaise(Deserializer):
    """Writes garbage into half the destination, then raises ``exc``."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def deserialize(self, src: Any, dst: Any, key: ObjectKey) -> None:
        out = as_byte_tensor(dst)
        out[: out.numel() // 2].fill_(0xEE)
        raise self.exc


class Returning(Serializer):
    def __init__(self, value: Any) -> None:
        self.value = value

    def serialize(self, src: Any, dst: Any, key: ObjectKey) -> Any:
        as_byte_tensor(dst).fill_(0x11)
        return self.value

    def estimate_serialized_size(self, layout_desc: MemoryLayoutDesc) -> int:
        return 64


@pytest.mark.parametrize("exc", RAISED)
def test_base_exception_in_serialize_fails_that_item_only(exc: BaseException) -> None:
    with AsyncSerdeProcessor(RaisingOnCall(exc, on=2), IdentityDeserializer(),
                             serde_type="t_raise") as p:
        dsts = [_bytes_obj(0) for _ in range(3)]
        task = p.submit_serialize([_bytes_obj(i + 1) for i in range(3)], dsts, KEYS)
        outcome = _wait_outcome(p, task, serialize=True)
        assert outcome.ok is False
        assert outcome.failed_items == (1,)
        assert outcome.item_errors[1] is exc
        assert dsts[1].get_size() == dsts[1].get_layout().nbytes  # not narrowed
        assert [d.get_size() for d in (dsts[0], dsts[2])] == [64, 64]
        assert torch.equal(as_byte_tensor(dsts[2]), torch.full((64,), 3, dtype=torch.uint8))
        # the worker survived: a later task on the same (single) worker succeeds
        p.serializer.calls = 10  # type: ignore[union-attr]
        later = p.submit_serialize([_bytes_obj(7)], [_bytes_obj(0)], KEYS[:1])
        assert wait_for_result(p, later, serialize=True)


def _wait_outcome(p: AsyncSerdeProcessor, task: int, *, serialize: bool) -> Any:
    from lmserde.events import wait_on_fd

    if serialize:
        return wait_on_fd(p.get_serialize_event_fd(), lambda: p.query_serialize_outcome(task),
                          timeout=30, what="serialize")
    return wait_on_fd(p.get_deserialize_event_fd(), lambda: p.query_deserialize_outcome(task),
                      timeout=30, what="deserialize")


@pytest.mark.parametrize("exc", RAISED)
def test_first_item_raising_base_exception_is_never_a_success(exc: BaseException) -> None:
    # Before the fix the error list was empty when the first item raised: all([]) -> ok=True.
    with AsyncSerdeProcessor(RaisingOnCall(exc, on=1), IdentityDeserializer()) as p:
        task = p.submit_serialize([_bytes_obj(1)], [_bytes_obj(0)], KEYS[:1])
        outcome = _wait_outcome(p, task, serialize=True)
        assert outcome.ok is False and outcome.failed_items == (0,)


@pytest.mark.parametrize("exc", RAISED)
def test_base_exception_in_deserialize_zeroes_the_destination(exc: BaseException) -> None:
    with AsyncSerdeProcessor(IdentitySerializer(), PartialThenRaise(exc)) as p:
        dst = _bytes_obj(0xA5)
        task = p.submit_deserialize([_bytes_obj(3)], [dst], KEYS[:1])
        outcome = _wait_outcome(p, task, serialize=False)
        assert outcome.ok is False and outcome.item_errors[0] is exc
        assert torch.count_nonzero(as_byte_tensor(dst)).item() == 0


def test_failure_is_logged_with_the_serde_type(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="lmserde.processor")
    with AsyncSerdeProcessor(RaisingOnCall(SystemExit(9), on=1), IdentityDeserializer(),
                             serde_type="t_exit") as p:
        task = p.submit_serialize([_bytes_obj(1)], [_bytes_obj(0)], KEYS[:1])
        assert not wait_for_result(p, task, serialize=True)
    assert any("t_exit" in r.getMessage() and "SystemExit" in r.getMessage()
               for r in caplog.records)


@pytest.mark.parametrize("value, message", [
    (True, "returned bool True"),
    (False, "returned bool False"),
    (-1, "negative"),
    (65, "more than its destination holds"),
    (None, "returned NoneType"),
    (12.0, "returned float"),
])
def test_bad_serialize_return_fails_the_item_and_narrows_nothing(value: Any,
                                                                 message: str) -> None:
    with AsyncSerdeProcessor(Returning(value), IdentityDeserializer(), serde_type="t_ret") as p:
        dst = _bytes_obj(0)
        task = p.submit_serialize([_bytes_obj(1)], [dst], KEYS[:1])
        outcome = _wait_outcome(p, task, serialize=True)
        assert outcome.ok is False
        error = outcome.item_errors[0]
        assert isinstance(error, SerializedSizeError)
        assert "t_ret" in str(error) and message in str(error)
        assert dst.get_size() == dst.get_layout().nbytes  # not narrowed


@pytest.mark.parametrize("value", [0, 1, 64])
def test_valid_serialize_return_narrows(value: int) -> None:
    with AsyncSerdeProcessor(Returning(value), IdentityDeserializer()) as p:
        dst = _bytes_obj(0)
        assert wait_for_result(p, p.submit_serialize([_bytes_obj(1)], [dst], KEYS[:1]),
                               serialize=True)
        assert dst.get_size() == value


def test_raising_event_hook_does_not_block_completion() -> None:
    from lmserde import hookimpl
    from lmserde.hooks import get_plugin_manager

    class Exploding:
        @hookimpl
        def lmserde_serde_task_finished(self, event: Any) -> None:
            raise SystemExit("observer gone")

    pm = get_plugin_manager()
    plugin = Exploding()
    pm.register(plugin)
    try:
        with AsyncSerdeProcessor(IdentitySerializer(), IdentityDeserializer()) as p:
            for _ in range(2):
                task = p.submit_serialize([_bytes_obj(1)], [_bytes_obj(0)], KEYS[:1])
                assert wait_for_result(p, task, serialize=True)
    finally:
        pm.unregister(plugin)
