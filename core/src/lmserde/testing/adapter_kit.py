"""The L2 adapter conformance kit: the contract every adapter of this repository passes.

Subclass :class:`L2AdapterConformance` in a test module, name the class ``Test...`` and implement
:meth:`~L2AdapterConformance.make_adapter`; pytest collects the inherited ``test_*`` methods::

    from lmserde.testing import L2AdapterConformance

    class TestMyAdapter(L2AdapterConformance):
        def make_adapter(self, tmp_path):
            return MyAdapter(base_path=tmp_path)

Each check builds a fresh adapter and closes it at the end. An adapter that needs a server takes
it from an autouse fixture of the subclass (see docs/writing-an-adapter.md). The checks cover
store/lookup/lock/unlock/load/delete semantics, results taken once, per-key results, stored
sizes and usage accounting, the event fds, listeners (a raising listener is isolated), argument
validation, concurrent submitters and close. Every wait is bounded by time
(:data:`ADAPTER_TIMEOUT_SECONDS`), never by a loop count.
"""

from __future__ import annotations

import os
import select
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import ClassVar

import torch

from lmserde.keys import ObjectKey
from lmserde.l2.contract.interface import L2AdapterInterface
from lmserde.l2.contract.store_result import L2StoreResult
from lmserde.l2.contract.sync_driver import (
    load_sync,
    lookup_sync,
    store_sync,
    wait_for_load,
    wait_for_lookup,
    wait_for_store,
)
from lmserde.layout import MemoryLayoutDesc
from lmserde.memory import TensorMemoryObj
from lmserde.testing.kit import random_object

__all__ = ["ADAPTER_TIMEOUT_SECONDS", "L2AdapterConformance", "adapter_key"]

#: How long the kit waits for any one adapter task or fd signal before the check fails.
ADAPTER_TIMEOUT_SECONDS = 30.0


def adapter_key(i: int, salt: str = "") -> ObjectKey:
    """The ``i``-th key the kit uses (``salt`` is the key's cache salt, i.e. the tenant)."""
    return ObjectKey(ObjectKey.IntHash2Bytes(i), "conformance/model", 0x01000100, 0, salt)


class _Recorder:
    """A listener that records every key event it receives."""

    def __init__(self) -> None:
        self.stored: list[tuple[ObjectKey, int]] = []
        self.deleted: list[ObjectKey] = []

    def on_l2_keys_stored(self, keys: list[ObjectKey], sizes: list[int]) -> None:
        self.stored.extend(zip(keys, sizes))

    def on_l2_keys_deleted(self, keys: list[ObjectKey]) -> None:
        self.deleted.extend(keys)


class _Raising:
    """A listener whose every callback raises (the adapter must carry on)."""

    def on_l2_keys_stored(self, keys: list[ObjectKey], sizes: list[int]) -> None:
        raise RuntimeError("listener failure (injected by the conformance kit)")

    on_l2_keys_deleted = on_l2_keys_stored  # type: ignore[assignment]
    on_l2_keys_accessed = on_l2_keys_stored  # type: ignore[assignment]


def _readable_within(fd: int, timeout: float) -> bool:
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(timeout * 1000.0))


class L2AdapterConformance:
    """Inherit in a ``Test...`` class and implement :meth:`make_adapter`."""

    #: The layout of the objects the kit stores (128 bytes by default).
    layout: ClassVar[MemoryLayoutDesc] = MemoryLayoutDesc([[4, 16]], [torch.float16])
    #: Whether :meth:`L2AdapterInterface.delete` removes keys (``False``: the no-op default).
    supports_delete: ClassVar[bool] = True

    # -- subclass interface ---------------------------------------------------------------------

    def make_adapter(self, tmp_path: Path) -> L2AdapterInterface:
        """A fresh, empty adapter; ``tmp_path`` is a directory private to this check."""
        raise NotImplementedError("implement make_adapter(tmp_path) in your Test class")

    # -- helpers --------------------------------------------------------------------------------

    @contextmanager
    def _adapter(self, tmp_path: Path) -> Iterator[L2AdapterInterface]:
        adapter = self.make_adapter(tmp_path)
        assert isinstance(adapter, L2AdapterInterface), (
            f"make_adapter returned {type(adapter).__name__}, not an L2AdapterInterface")
        try:
            yield adapter
        finally:
            adapter.close()

    def _objects(self, n: int, first_seed: int = 0) -> list[TensorMemoryObj]:
        return [random_object(self.layout, first_seed + i) for i in range(n)]

    def _blank(self, n: int) -> list[TensorMemoryObj]:
        return [TensorMemoryObj.allocate(self.layout, zero=True) for _ in range(n)]

    def _store(self, adapter: L2AdapterInterface, keys: Sequence[ObjectKey],
               objects: Sequence[TensorMemoryObj]) -> L2StoreResult:
        return store_sync(adapter, keys, objects, timeout=ADAPTER_TIMEOUT_SECONDS)

    # -- checks ---------------------------------------------------------------------------------

    def test_event_fds_are_three_distinct_open_descriptors(self, tmp_path: Path) -> None:
        with self._adapter(tmp_path) as adapter:
            fds = [adapter.get_store_event_fd(), adapter.get_lookup_and_lock_event_fd(),
                   adapter.get_load_event_fd()]
            assert len(set(fds)) == 3, f"event fds must be distinct, got {fds}"
            for fd in fds:
                os.fstat(fd)  # raises for a closed or invalid descriptor

    def test_store_lookup_load_round_trip(self, tmp_path: Path) -> None:
        with self._adapter(tmp_path) as adapter:
            keys = [adapter_key(i, "tenant") for i in range(3)]
            objs = self._objects(3)
            result = self._store(adapter, keys, objs)
            assert result.is_successful()
            assert result.bytes_transferred() == 3 * self.layout.nbytes
            probe = [keys[0], adapter_key(99), keys[2]]
            assert lookup_sync(adapter, probe).to_list() == [True, False, True]
            adapter.submit_unlock([keys[0], keys[2]])
            dsts = self._blank(3)
            assert load_sync(adapter, probe, dsts).to_list() == [True, False, True]
            assert torch.equal(dsts[0].raw_data, objs[0].raw_data)
            assert torch.equal(dsts[2].raw_data, objs[2].raw_data)
            assert int(dsts[1].raw_data.count_nonzero()) == 0, "a miss must not write its object"

    def test_results_are_taken_once(self, tmp_path: Path) -> None:
        with self._adapter(tmp_path) as adapter:
            key = adapter_key(1)
            task = adapter.submit_store_task([key], self._objects(1))
            assert wait_for_store(adapter, task, ADAPTER_TIMEOUT_SECONDS).is_successful()
            assert task not in adapter.pop_completed_store_tasks()
            lookup = adapter.submit_lookup_and_lock_task([key])
            assert wait_for_lookup(adapter, lookup, ADAPTER_TIMEOUT_SECONDS).to_list() == [True]
            assert adapter.query_lookup_and_lock_result(lookup) is None
            adapter.submit_unlock([key])
            load = adapter.submit_load_task([key], self._blank(1))
            assert wait_for_load(adapter, load, ADAPTER_TIMEOUT_SECONDS).to_list() == [True]
            assert adapter.query_load_result(load) is None
            assert adapter.query_load_result(987_654_321) is None
            assert adapter.query_lookup_and_lock_result(987_654_321) is None

    def test_task_ids_are_unique(self, tmp_path: Path) -> None:
        with self._adapter(tmp_path) as adapter:
            ids = [adapter.submit_store_task([adapter_key(i)], self._objects(1, i))
                   for i in range(4)]
            ids += [adapter.submit_lookup_and_lock_task([adapter_key(0)]) for _ in range(2)]
            assert len(set(ids)) == len(ids), f"task ids repeat: {ids}"
            stores: dict[int, L2StoreResult] = {}
            for task in ids[:4]:
                if task not in stores:
                    stores[task] = wait_for_store(adapter, task, ADAPTER_TIMEOUT_SECONDS,
                                                  others=stores)
            assert all(r.is_successful() for r in stores.values())
            for task in ids[4:]:
                wait_for_lookup(adapter, task, ADAPTER_TIMEOUT_SECONDS)
                adapter.submit_unlock([adapter_key(0)])

    def test_store_signals_its_event_fd(self, tmp_path: Path) -> None:
        with self._adapter(tmp_path) as adapter:
            adapter.submit_store_task([adapter_key(0)], self._objects(1))
            assert _readable_within(adapter.get_store_event_fd(), ADAPTER_TIMEOUT_SECONDS), (
                "a finished store must make the store event fd readable")
            assert len(adapter.pop_completed_store_tasks()) == 1

    def test_load_of_a_wrong_sized_destination_misses(self, tmp_path: Path) -> None:
        with self._adapter(tmp_path) as adapter:
            key = adapter_key(0)
            self._store(adapter, [key], self._objects(1))
            wrong = TensorMemoryObj.allocate(
                MemoryLayoutDesc([[self.layout.nbytes // 2 + 1]], [torch.uint8]), zero=True)
            ok = self._blank(1)[0]
            # failure isolation: the bad destination misses alone, the good one still loads
            assert load_sync(adapter, [key, key], [wrong, ok]).to_list() == [False, True]
            assert int(wrong.raw_data.count_nonzero()) == 0

    def test_stored_sizes_are_logical_sizes(self, tmp_path: Path) -> None:
        with self._adapter(tmp_path) as adapter:
            buf = TensorMemoryObj.allocate(MemoryLayoutDesc([[32]], [torch.uint8]))
            buf.raw_data.copy_(torch.arange(32, dtype=torch.uint8))
            buf.set_used_size(7)
            assert self._store(adapter, [adapter_key(0)], [buf]).bytes_transferred() == 7
            if adapter.reports_object_sizes():
                sizes = adapter.get_object_sizes([adapter_key(0), adapter_key(1)])
                assert sizes == {adapter_key(0): 7}
            else:
                assert adapter.get_object_sizes([adapter_key(0)]) == {}
            dst = TensorMemoryObj.allocate(MemoryLayoutDesc([[7]], [torch.uint8]))
            assert load_sync(adapter, [adapter_key(0)], [dst]).to_list() == [True]
            assert torch.equal(dst.raw_data, torch.arange(7, dtype=torch.uint8))

    def test_usage_is_accounted_per_salt(self, tmp_path: Path) -> None:
        with self._adapter(tmp_path) as adapter:
            n = self.layout.nbytes
            self._store(adapter, [adapter_key(0, "a"), adapter_key(1, "a"), adapter_key(2, "b")],
                        self._objects(3))
            self._store(adapter, [adapter_key(0, "a")], self._objects(1))  # stored again
            usage = adapter.get_usage()
            assert usage.total_bytes_used == 3 * n
            assert dict(usage.bytes_by_cache_salt) == {"a": 2 * n, "b": n}

    def test_delete_removes_keys_and_their_bytes(self, tmp_path: Path) -> None:
        with self._adapter(tmp_path) as adapter:
            keys = [adapter_key(i) for i in range(3)]
            self._store(adapter, keys, self._objects(3))
            recorder = _Recorder()
            adapter.register_listener(recorder)
            adapter.delete([keys[0], keys[2], adapter_key(77)])  # an unknown key is no error
            expected = [False, True, False] if self.supports_delete else [True, True, True]
            assert lookup_sync(adapter, keys).to_list() == expected
            adapter.submit_unlock([k for k, hit in zip(keys, expected) if hit])
            if self.supports_delete:
                assert adapter.get_usage().total_bytes_used == self.layout.nbytes
                assert set(recorder.deleted) == {keys[0], keys[2]}

    def test_listeners_hear_stores_and_a_raising_listener_is_isolated(
            self, tmp_path: Path) -> None:
        with self._adapter(tmp_path) as adapter:
            adapter.register_listener(_Raising())
            recorder = _Recorder()
            adapter.register_listener(recorder)
            keys = [adapter_key(i) for i in range(2)]
            assert self._store(adapter, keys, self._objects(2)).is_successful()
            assert sorted(recorder.stored, key=lambda e: e[0].chunk_hash) == sorted(
                ((k, self.layout.nbytes) for k in keys), key=lambda e: e[0].chunk_hash)
            assert load_sync(adapter, keys, self._blank(2)).to_list() == [True, True]
            assert adapter.report_status()["is_healthy"] is True

    def test_mismatched_keys_and_objects_are_rejected(self, tmp_path: Path) -> None:
        with self._adapter(tmp_path) as adapter:
            for submit in (adapter.submit_store_task, adapter.submit_load_task):
                try:
                    submit([adapter_key(0), adapter_key(1)], self._blank(1))
                except ValueError:
                    continue
                raise AssertionError(f"{submit.__name__} accepted 2 keys with 1 object")

    def test_concurrent_submitters_all_complete(self, tmp_path: Path) -> None:
        with self._adapter(tmp_path) as adapter:
            threads_n, per_thread = 4, 5
            errors: list[BaseException] = []
            tasks: list[int] = []
            lock = threading.Lock()

            def submit(t: int) -> None:
                try:
                    for i in range(per_thread):
                        k = t * per_thread + i
                        task = adapter.submit_store_task([adapter_key(k)], self._objects(1, k))
                        with lock:
                            tasks.append(task)
                except BaseException as exc:  # reported below, in the test's thread
                    errors.append(exc)

            workers = [threading.Thread(target=submit, args=(t,)) for t in range(threads_n)]
            for w in workers:
                w.start()
            for w in workers:
                w.join(ADAPTER_TIMEOUT_SECONDS)
            assert not errors, errors
            results: dict[int, L2StoreResult] = {}
            for task in tasks:
                if task not in results:
                    results[task] = wait_for_store(adapter, task, ADAPTER_TIMEOUT_SECONDS,
                                                   others=results)
            assert len(results) == threads_n * per_thread
            assert all(r.is_successful() for r in results.values())
            everything = [adapter_key(k) for k in range(threads_n * per_thread)]
            assert all(load_sync(adapter, everything, self._blank(len(everything))).to_list())

    def test_status_reports_healthy_and_type(self, tmp_path: Path) -> None:
        with self._adapter(tmp_path) as adapter:
            status = adapter.report_status()
            assert status["is_healthy"] is True
            assert isinstance(status.get("type"), str) and status["type"]

    def test_close_is_idempotent_and_final(self, tmp_path: Path) -> None:
        adapter = self.make_adapter(tmp_path)
        self._store_one_then_close(adapter)
        adapter.close()  # a second close is harmless
        for submit in (adapter.submit_store_task, adapter.submit_load_task):
            try:
                submit([adapter_key(0)], self._objects(1))
            except RuntimeError as exc:
                assert "closed" in str(exc), f"{submit.__name__} after close: {exc}"
                continue
            raise AssertionError(f"{submit.__name__} after close() did not raise RuntimeError")

    def _store_one_then_close(self, adapter: L2AdapterInterface) -> None:
        try:
            assert self._store(adapter, [adapter_key(0)], self._objects(1)).is_successful()
        finally:
            adapter.close()
