"""``CoordinatingAdapter``: the frame the serde wrapper and the split tier share, used by a
minimal coordinating adapter of its own (stores and loads relayed through an inner adapter)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
import torch
from lmserde import MemoryLayoutDesc, MemoryObj, ObjectKey, TensorMemoryObj
from lmserde.l2 import (
    Bitmap,
    L2StoreResult,
    MemoryL2Adapter,
    SerdeL2AdapterWrapper,
    SplitTierL2Adapter,
    load_sync,
    lookup_sync,
    store_sync,
)
from lmserde.l2.contract.coordinating_adapter import CoordinatingAdapter
from lmserde.l2.contract.in_flight import InFlight
from lmserde.l2.contract.inner_delegation import InnerAdapterDelegation

LAYOUT = MemoryLayoutDesc([[64]], [torch.uint8])


class Relay(InnerAdapterDelegation, CoordinatingAdapter):
    """Stores and loads go to the inner adapter and complete on this adapter's own queues."""

    def __init__(self, inner: MemoryL2Adapter) -> None:
        super().__init__(inner, "test-relay")
        self.healthy = True
        self._stores: InFlight[int] = InFlight()
        self._loads: InFlight[tuple[int, int]] = InFlight()
        self._watch({inner.get_store_event_fd(): self._drain_stores,
                     inner.get_load_event_fd(): self._drain_loads})

    def submit_store_task(self, keys: Sequence[ObjectKey], objects: Sequence[MemoryObj]) -> int:
        self._check_open()
        task_id = self._queues.new_task_id()
        if self._stores.start(task_id, lambda: self._inner.submit_store_task(keys, objects)):
            self._queues.store.complete(task_id, L2StoreResult(False, 0))
        return task_id

    def submit_load_task(self, keys: Sequence[ObjectKey], objects: Sequence[MemoryObj]) -> int:
        self._check_open()
        task_id = self._queues.new_task_id()
        if self._loads.start((task_id, len(keys)),
                             lambda: self._inner.submit_load_task(keys, objects)):
            self._queues.load.complete(task_id, Bitmap(len(keys)))
        return task_id

    def _drain_stores(self) -> None:
        for task_id, result in self._stores.finished_among(self._inner.pop_completed_store_tasks):
            self._queues.store.complete(task_id, result)

    def _drain_loads(self) -> None:
        for (task_id, _), bitmap in self._loads.finished(self._inner.query_load_result):
            self._queues.load.complete(task_id, bitmap)

    def report_status(self) -> dict[str, Any]:
        return self._status_over_inner({"relayed": True}, healthy=self.healthy)

    def close(self) -> None:
        if not self._begin_close():
            return
        self._loop.stop()
        self._inner.close()
        for task_id in self._stores.close():
            self._queues.store.complete(task_id, L2StoreResult(False, 0))
        for task_id, n in self._loads.close():
            self._queues.load.complete(task_id, Bitmap(n))
        self._queues.close()


def obj(value: int) -> TensorMemoryObj:
    out = TensorMemoryObj.allocate(LAYOUT)
    out.get_tensor(0).fill_(value)
    return out


def key(i: int) -> ObjectKey:
    return ObjectKey(ObjectKey.IntHash2Bytes(i), "m", 0)


def test_a_coordinating_adapter_relays_through_its_inner_adapter() -> None:
    with Relay(MemoryL2Adapter(1 << 20)) as relay:
        assert relay.adapter_type == "memory" and relay.max_capacity_bytes == 1 << 20
        assert isinstance(relay.inner_adapter, MemoryL2Adapter)
        assert len({relay.get_store_event_fd(), relay.get_load_event_fd(),
                    relay.inner_adapter.get_store_event_fd()}) == 3  # its own queues
        assert store_sync(relay, [key(1)], [obj(3)]).is_successful()
        assert lookup_sync(relay, [key(1), key(2)]).count() == 1  # the inner adapter's lookup
        relay.submit_unlock([key(1)])
        out = obj(0)
        assert load_sync(relay, [key(1)], [out]).count() == 1
        assert torch.equal(out.get_tensor(0), obj(3).get_tensor(0))
    assert relay.closed


def test_the_status_is_the_inner_adapters_plus_its_own() -> None:
    relay = Relay(MemoryL2Adapter(1 << 20))
    inner = relay.inner_adapter.report_status()
    status = relay.report_status()
    assert status["relayed"] is True and status["is_healthy"] is True
    assert {k: v for k, v in status.items() if k != "relayed"} == inner
    relay.healthy = False
    assert relay.report_status()["is_healthy"] is False
    relay.healthy = True
    relay.close()
    assert relay.report_status()["is_healthy"] is False


def test_close_is_idempotent_and_a_closed_adapter_refuses_tasks() -> None:
    relay = Relay(MemoryL2Adapter(1 << 20))
    relay.close()
    relay.close()
    with pytest.raises(RuntimeError, match="^Relay is closed$"):
        relay.submit_store_task([key(1)], [obj(1)])


@pytest.mark.parametrize("adapter", [SerdeL2AdapterWrapper, SplitTierL2Adapter])
def test_the_wrapper_and_the_split_tier_share_the_frame(adapter: type) -> None:
    assert issubclass(adapter, CoordinatingAdapter)
