"""The serde wrapper contains whatever a serde processor or an inner adapter raises.

A serde plugin may hand the wrapper its own ``SerdeProcessor``, and adapters are plugins too:
every call the wrapper makes into them — submitting, querying, estimating, sizing, repairing —
may raise any ``BaseException``. The task it belongs to fails (a failed store, a miss), every
temporary goes back to L1, the poll thread keeps serving later tasks, and nothing escapes to
the caller (only Ctrl-C on the main thread would).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from datapath_driver import Cache, key_of, objects_for
from lmserde import AsyncSerdeProcessor, MemoryLayoutDesc, ObjectKey
from lmserde.identity import IdentityDeserializer, IdentitySerializer
from lmserde.l1 import L1Manager
from lmserde.l2 import FSL2Adapter, SerdeL2AdapterWrapper
from lmserde.spec import SerdeSizeContract

KV = MemoryLayoutDesc([[8, 2, 16]], [torch.float16])
# (KeyboardInterrupt is contained too, except on the main thread, where the submits run and it
# means Ctrl-C: see the poll-thread test below)
RAISED = [SystemExit(3), asyncio.CancelledError(), GeneratorExit(), RuntimeError("plugin bug")]
IDS = [type(e).__name__ for e in RAISED]


class _Trap:
    """Raises ``exc`` from the methods named in ``methods`` while ``armed``."""

    def _arm_with(self, exc: BaseException, methods: Sequence[str]) -> None:
        self.exc, self.methods, self.armed = exc, set(methods), False

    def _maybe_raise(self, name: str) -> None:
        if self.armed and name in self.methods:
            raise self.exc


class _Raising(_Trap, AsyncSerdeProcessor):
    """Identity processor whose named methods raise while armed."""

    def __init__(self, exc: BaseException, methods: Sequence[str]) -> None:
        super().__init__(_Estimating(self), IdentityDeserializer())
        self._arm_with(exc, methods)

    def submit_serialize(self, *args: Any) -> int:
        self._maybe_raise("submit_serialize")
        return super().submit_serialize(*args)

    def query_serialize_result(self, task_id: int) -> bool | None:
        self._maybe_raise("query_serialize_result")
        return super().query_serialize_result(task_id)

    def submit_deserialize(self, *args: Any) -> int:
        self._maybe_raise("submit_deserialize")
        return super().submit_deserialize(*args)

    def query_deserialize_outcome(self, task_id: int) -> Any:
        self._maybe_raise("query_deserialize")
        return super().query_deserialize_outcome(task_id)

    def query_deserialize_result(self, task_id: int) -> bool | None:
        self._maybe_raise("query_deserialize")
        return super().query_deserialize_result(task_id)


class _Estimating(IdentitySerializer):
    def __init__(self, owner: _Raising) -> None:
        self.owner = owner

    def estimate_serialized_size(self, layout_desc: MemoryLayoutDesc) -> int:
        self.owner._maybe_raise("estimate_serialized_size")
        return super().estimate_serialized_size(layout_desc)


class _RaisingFS(_Trap, FSL2Adapter):
    """An fs adapter whose named methods raise while armed."""

    def __init__(self, path: Path, exc: BaseException, methods: Sequence[str]) -> None:
        super().__init__(path)
        self._arm_with(exc, methods)

    def delete(self, keys: Sequence[ObjectKey]) -> None:
        self._maybe_raise("delete")
        super().delete(keys)

    def submit_load_task(self, *args: Any) -> int:
        self._maybe_raise("submit_load_task")
        return super().submit_load_task(*args)

    def query_load_result(self, task_id: int) -> Any:
        self._maybe_raise("query_load_result")
        return super().query_load_result(task_id)

    def get_object_sizes(self, keys: Sequence[ObjectKey]) -> dict[ObjectKey, int]:
        self._maybe_raise("get_object_sizes")
        return super().get_object_sizes(keys)


def _wrapper(tmp_path: Path, l1: L1Manager, proc: AsyncSerdeProcessor,
             inner: FSL2Adapter | None = None) -> SerdeL2AdapterWrapper:
    return SerdeL2AdapterWrapper(inner or FSL2Adapter(tmp_path), proc, l1,
                                 size_contract=SerdeSizeContract.EXACT)


def _check_still_serving(wrapper: SerdeL2AdapterWrapper, cache: Cache, l1: L1Manager) -> None:
    """Nothing leaked, and a healthy store and load still go through the poll thread."""
    assert l1.memory_used_bytes() == 0
    fresh = [key_of(99)]
    assert cache.store(wrapper, fresh, objects_for(KV, 1, seed=9)).is_successful()
    assert cache.load(wrapper, fresh, KV)[0].to_list() == [True]
    assert l1.memory_used_bytes() == 0


@pytest.mark.parametrize("exc", RAISED, ids=IDS)
@pytest.mark.parametrize("method", ["submit_serialize", "query_serialize_result",
                                    "estimate_serialized_size"])
def test_a_raising_processor_fails_the_store(method: str, exc: BaseException, tmp_path: Path,
                                             l1: L1Manager, cache: Cache) -> None:
    proc = _Raising(exc, [method])
    with _wrapper(tmp_path, l1, proc) as wrapper:
        proc.armed = True
        assert not cache.store(wrapper, [key_of(1)], objects_for(KV, 1)).is_successful()
        proc.armed = False
        assert not os.listdir(tmp_path) or os.listdir(tmp_path) == [".tmp"]
        _check_still_serving(wrapper, cache, l1)


@pytest.mark.parametrize("exc", RAISED, ids=IDS)
@pytest.mark.parametrize("method", ["submit_deserialize", "query_deserialize",
                                    "estimate_serialized_size"])
def test_a_raising_processor_makes_the_load_a_miss(method: str, exc: BaseException,
                                                   tmp_path: Path, l1: L1Manager,
                                                   cache: Cache) -> None:
    proc = _Raising(exc, [method])
    with _wrapper(tmp_path, l1, proc) as wrapper:
        keys = [key_of(1), key_of(2)]
        assert cache.store(wrapper, keys, objects_for(KV, 2)).is_successful()
        if method == "estimate_serialized_size":
            wrapper._shape._estimates.clear()  # the estimate is cached per layout after the store
        proc.armed = True
        assert cache.load(wrapper, keys, KV)[0].to_list() == [False, False]
        proc.armed = False
        _check_still_serving(wrapper, cache, l1)


@pytest.mark.parametrize("exc", RAISED, ids=IDS)
@pytest.mark.parametrize("method", ["submit_load_task", "query_load_result", "delete"])
def test_a_raising_inner_adapter_makes_the_load_a_miss(method: str, exc: BaseException,
                                                       tmp_path: Path, l1: L1Manager,
                                                       cache: Cache) -> None:
    inner = _RaisingFS(tmp_path, exc, [method])
    with _wrapper(tmp_path, l1, AsyncSerdeProcessor(IdentitySerializer(), IdentityDeserializer()),
                  inner) as wrapper:
        key = key_of(1)
        assert cache.store(wrapper, [key], objects_for(KV, 1)).is_successful()
        if method == "delete":  # the repair of a damaged object is what calls delete
            path = inner.path_of(key)
            data = bytearray(Path(path).read_bytes())
            data[-1] ^= 1
            Path(path).write_bytes(bytes(data))
        inner.armed = True
        assert cache.load(wrapper, [key], KV)[0].to_list() == [False]
        inner.armed = False
        if method == "delete":
            assert wrapper.metrics()["rejections"] == {"checksum": 1}
        _check_still_serving(wrapper, cache, l1)


@pytest.mark.parametrize("exc", RAISED, ids=IDS)
def test_sizes_are_asked_key_by_key_when_the_batch_raises(exc: BaseException, tmp_path: Path,
                                                          l1: L1Manager) -> None:
    """An upper-bound serde needs each key's stored size; one key the adapter chokes on must not
    hide the others'."""
    bad = key_of(3)

    class _ChokesOnOneKey(FSL2Adapter):
        def get_object_sizes(self, keys: Sequence[ObjectKey]) -> dict[ObjectKey, int]:
            if bad in keys:
                raise exc
            return super().get_object_sizes(keys)

    proc = AsyncSerdeProcessor(IdentitySerializer(), IdentityDeserializer())
    wrapper = SerdeL2AdapterWrapper(_ChokesOnOneKey(tmp_path), proc, l1,
                                    size_contract=SerdeSizeContract.UPPER_BOUND)
    with wrapper:
        assert wrapper.stored_sizes([key_of(1), bad]) == {}  # nothing stored yet
        cache = Cache(l1)
        keys = [key_of(1), key_of(2), bad]
        assert cache.store(wrapper, keys, objects_for(KV, 3)).is_successful()
        sizes: Callable[[], dict[ObjectKey, int]] = lambda: wrapper.stored_sizes(keys)  # noqa: E731
        framed = KV.nbytes + 64
        assert sizes() == {key_of(1): framed, key_of(2): framed}
        hits, _ = cache.load(wrapper, keys, KV)
        assert hits.to_list()[:2] == [True, True]  # (the third loads unnarrowed: identity
        # writes its whole estimate, so the file still matches the temporary's length)


@pytest.mark.parametrize("method", ["query_serialize_result", "query_deserialize",
                                    "submit_deserialize"])
def test_a_keyboard_interrupt_off_the_main_thread_is_contained(method: str, tmp_path: Path,
                                                               l1: L1Manager,
                                                               cache: Cache) -> None:
    """These calls run on the wrapper's poll thread, where a KeyboardInterrupt is no Ctrl-C."""
    proc = _Raising(KeyboardInterrupt(), [method])
    with _wrapper(tmp_path, l1, proc) as wrapper:
        key = [key_of(1)]
        if method == "query_serialize_result":
            proc.armed = True
            assert not cache.store(wrapper, key, objects_for(KV, 1)).is_successful()
        else:
            assert cache.store(wrapper, key, objects_for(KV, 1)).is_successful()
            proc.armed = True
            assert cache.load(wrapper, key, KV)[0].to_list() == [False]
        proc.armed = False
        _check_still_serving(wrapper, cache, l1)
