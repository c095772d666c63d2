"""Which failed decodes delete the stored object.

Behind the stored-object frame the bytes a serde gets are vouched for (header, key, config and
checksum checked), so a decode that fails is the serde's verdict on them only when it raises a
``ValueError`` (the deserializer contract for bad input): that object is refused as ``decode``
and deleted, and the next store writes it again. Any other failure — a key service that cannot
be reached, a cancelled call, a processor that reports no per-item error — is a miss that keeps
the object: deleting would wipe good objects for as long as the outage lasts. Without the frame
nothing vouches for the bytes, and every failed decode deletes.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from datapath_driver import Cache, key_of, layout_bytes, objects_for
from lmserde import AsyncSerdeProcessor, MemoryLayoutDesc
from lmserde.identity import IdentitySerializer
from lmserde.l1 import L1Manager
from lmserde.l2 import FSL2Adapter, SerdeL2AdapterWrapper
from lmserde.l2.serde.wrapper import UNHEALTHY_AFTER_FAILURES
from lmserde.spec import SerdeSizeContract
from toy_serdes import OutageDeserializer

KV = MemoryLayoutDesc([[8, 2, 16]], [torch.float16])


class _NoOutcomes(AsyncSerdeProcessor):
    reports_item_outcomes = False


def _wrapper(tmp_path: Path, l1: L1Manager, deserializer: OutageDeserializer, *, frame: bool = True,
             outcomes: bool = True) -> tuple[SerdeL2AdapterWrapper, FSL2Adapter]:
    inner = FSL2Adapter(tmp_path)
    kind = AsyncSerdeProcessor if outcomes else _NoOutcomes
    wrapper = SerdeL2AdapterWrapper(inner, kind(IdentitySerializer(), deserializer), l1,
                                    size_contract=SerdeSizeContract.EXACT, frame=frame)
    return wrapper, inner


@pytest.mark.parametrize("error", [ConnectionError("kms down"), TimeoutError(), OSError(5, "EIO"),
                                   RuntimeError("serde bug"), MemoryError()],
                         ids=["ConnectionError", "TimeoutError", "OSError", "RuntimeError",
                              "MemoryError"])
def test_a_failure_that_is_not_about_the_bytes_keeps_the_object(
        error: BaseException, tmp_path: Path, l1: L1Manager, cache: Cache) -> None:
    deserializer = OutageDeserializer()
    deserializer.error = error
    wrapper, inner = _wrapper(tmp_path, l1, deserializer)
    with wrapper:
        keys = [key_of(1), key_of(2)]
        sources = objects_for(KV, 2)
        assert cache.store(wrapper, keys, sources).is_successful()
        deserializer.down = True
        for _ in range(UNHEALTHY_AFTER_FAILURES):
            assert cache.load(wrapper, keys, KV)[0].to_list() == [False, False]
        assert not wrapper.report_status()["is_healthy"]  # an outage is visible
        metrics = wrapper.metrics()
        assert metrics["rejections"] == {} and metrics["repaired"] == 0
        assert metrics["failures"]["deserialize"] == 2 * UNHEALTHY_AFTER_FAILURES
        assert inner.get_object_sizes(keys).keys() == set(keys)  # still stored
        deserializer.down = False
        hits, data = cache.load(wrapper, keys, KV)
        assert hits.to_list() == [True, True]
        assert all(torch.equal(got, layout_bytes(src)) for got, src in zip(data, sources))
        assert wrapper.report_status()["is_healthy"]


@pytest.mark.parametrize(("frame", "error"), [
    (True, ValueError("not a frame of mine")),  # framed: the serde's verdict on the bytes
    (False, ConnectionError("kms down")),  # unframed: nothing vouches for the bytes
], ids=["framed ValueError", "unframed, any error"])
def test_a_decode_that_condemns_the_bytes_deletes_the_object(
        frame: bool, error: BaseException, tmp_path: Path, l1: L1Manager, cache: Cache) -> None:
    deserializer = OutageDeserializer()
    deserializer.error = error
    wrapper, inner = _wrapper(tmp_path, l1, deserializer, frame=frame)
    with wrapper:
        key = [key_of(1)]
        assert cache.store(wrapper, key, objects_for(KV, 1)).is_successful()
        deserializer.down = True
        assert cache.load(wrapper, key, KV)[0].to_list() == [False]
        assert wrapper.metrics()["rejections"] == {"decode": 1}
        assert inner.get_object_sizes(key) == {}  # deleted: the next store writes it again
        deserializer.down = False
        assert cache.store(wrapper, key, objects_for(KV, 1)).bytes_transferred() > 0
        assert cache.load(wrapper, key, KV)[0].to_list() == [True]


def test_a_processor_without_item_outcomes_never_condemns_a_whole_batch(
        tmp_path: Path, l1: L1Manager, cache: Cache) -> None:
    """It only says that the task failed, not which object: none of them is deleted."""
    deserializer = OutageDeserializer()
    deserializer.error = ValueError("bad bytes, but which object?")
    wrapper, inner = _wrapper(tmp_path, l1, deserializer, outcomes=False)
    with wrapper:
        keys = [key_of(i) for i in range(3)]
        assert cache.store(wrapper, keys, objects_for(KV, 3)).is_successful()
        deserializer.down = True
        assert cache.load(wrapper, keys, KV)[0].to_list() == [False] * 3
        assert wrapper.metrics()["rejections"] == {}
        assert inner.get_object_sizes(keys).keys() == set(keys)
