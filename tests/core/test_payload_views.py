"""lmserde.l2.serde.payload_views: the wrapper's payload views are reused per pooled buffer,
handed out as if new, and never outlive or mix up their buffers; the wrapper's stores and loads
through reused views keep using the serde's own checksum and stay correct."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest
import torch
from lmserde import MemoryLayoutDesc, ObjectKey, TensorMemoryObj
from lmserde.frame_checksum import FramedPayload, checksum_kernel, payload_hasher
from lmserde.l1 import L1Manager
from lmserde.l2 import create_l2_adapter, load_sync, store_sync
from lmserde.l2.serde import stored_frame
from lmserde.l2.serde.payload_views import VIEWS_PER_BUFFER, PayloadViews, byte_view


def _buffer(n: int = 4096) -> TensorMemoryObj:
    return TensorMemoryObj.over(torch.zeros(n, dtype=torch.uint8),
                                MemoryLayoutDesc([[n]], [torch.uint8]))


def test_a_view_covers_its_range_and_is_reused_reset() -> None:
    views, buf = PayloadViews(), _buffer()
    first = views.view(buf, 64, 1064, hashing=True)
    assert isinstance(first, FramedPayload) and first.get_size() == 1000
    assert first.raw_data.data_ptr() == buf.raw_data.data_ptr() + 64
    first.set_used_size(10)
    hasher = first.payload_hasher()
    again = views.view(buf, 64, 1064, hashing=True)
    assert again is first and again.get_size() == 1000  # the used size is undone
    assert again.payload_hasher() is not hasher  # a new use gets a fresh hasher


@pytest.mark.skipif(checksum_kernel() is None, reason="bound hashers need the checksum kernel")
def test_a_reused_view_hashes_its_new_bytes_only() -> None:
    views, buf = PayloadViews(), _buffer()
    view = views.view(buf, 64, 4096, hashing=True)
    payload_hasher(view).copy_in(torch.ones(4032, dtype=torch.uint8))
    first = view.verified_checksum(4032)
    view = views.view(buf, 64, 4096, hashing=True)
    assert view.verified_checksum(4032) is None  # nothing vouched for before the new pass
    payload_hasher(view).copy_in(torch.full((4032,), 7, dtype=torch.uint8))
    assert view.verified_checksum(4032) not in (None, first)


def test_ranges_kinds_and_buffers_get_views_of_their_own() -> None:
    views, a, b = PayloadViews(), _buffer(), _buffer()
    made = {views.view(a, 64, 128), views.view(a, 64, 129), views.view(a, 64, 128, hashing=True),
            views.view(b, 64, 128)}
    assert len(made) == 4
    assert not isinstance(views.view(a, 64, 128), FramedPayload)


def test_a_buffer_keeps_its_most_recent_views_only() -> None:
    views, buf = PayloadViews(), _buffer()
    first = views.view(buf, 64, 100)
    for stop in range(101, 101 + VIEWS_PER_BUFFER):
        views.view(buf, 64, stop)
    assert views.view(buf, 64, 100) is not first
    newest = views.view(buf, 64, 100 + VIEWS_PER_BUFFER)
    assert views.view(buf, 64, 100 + VIEWS_PER_BUFFER) is newest


def test_views_do_not_keep_their_buffer_alive() -> None:
    views, buf = PayloadViews(), _buffer()
    views.view(buf, 64, 128)
    assert len(views._views) == 1
    del buf
    gc.collect()
    assert len(views._views) == 0


def test_other_memory_objects_get_a_new_view_each_time() -> None:
    class Foreign:  # a MemoryObj of another kind: only raw_data is needed
        raw_data = torch.zeros(256, dtype=torch.uint8)

    views = PayloadViews()
    assert views.view(Foreign(), 64, 128) is not views.view(Foreign(), 64, 128)  # type: ignore[arg-type]
    assert byte_view(torch.zeros(8, dtype=torch.uint8), hashing=True).get_size() == 8


@pytest.mark.skipif(checksum_kernel() is None, reason="the serde checksum needs the kernel")
def test_stores_and_loads_through_reused_views_use_the_serdes_checksum(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each pooled temporary serves several framed stores and loads: every object must come back
    exact, with the checksum taken from identity's fused copy each time (the wrapper never has
    to hash a payload itself)."""
    hashed_here: list[int] = []
    original = stored_frame.payload_checksum
    monkeypatch.setattr(stored_frame, "payload_checksum",
                        lambda payload: (hashed_here.append(1), original(payload))[1])
    n = 6 << 20  # over one checksum segment: loads are hashed by the serde too
    layout = MemoryLayoutDesc([[n]], [torch.uint8])
    l1 = L1Manager(64 * n)
    adapter = create_l2_adapter({"type": "fs", "base_path": str(tmp_path), "serde": {"type": "identity"}}, l1)
    try:
        for i in range(4):
            key = ObjectKey(bytes([i]) * 16, "m", 0)
            src = TensorMemoryObj.over(torch.full((n,), i + 1, dtype=torch.uint8), layout)
            assert store_sync(adapter, [key], [src], 30).is_successful()
            dst = TensorMemoryObj.over(torch.zeros(n, dtype=torch.uint8), layout)
            assert load_sync(adapter, [key], [dst], 30).test(0)
            assert torch.equal(dst.raw_data, src.raw_data)
        assert l1.pool_stats().hits > 0  # the temporaries were reused
    finally:
        adapter.close()
    assert hashed_here == []
