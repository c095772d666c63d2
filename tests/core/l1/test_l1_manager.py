"""L1Manager: per-key results, lock states, temporaries, capacity, accounting, threads."""

from __future__ import annotations

import threading

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from lmserde import MemoryFormat, MemoryLayoutDesc, ObjectKey
from lmserde.l1 import L1Error, L1Manager

OK, OOM = L1Error.SUCCESS, L1Error.OUT_OF_MEMORY
MISSING, WRONG, TAKEN = L1Error.KEY_NOT_EXIST, L1Error.KEY_IN_WRONG_STATE, L1Error.KEY_NOT_WRITABLE
L100 = MemoryLayoutDesc([[100]], [torch.uint8])
KV = MemoryLayoutDesc([[4, 8]], [torch.float16])  # 64 bytes


def key(i: int, salt: str = "") -> ObjectKey:
    return ObjectKey(ObjectKey.IntHash2Bytes(i), "m", 0, 0, salt)


def errors(result: dict) -> list[L1Error]:
    return [error for error, _ in result.values()]


def test_reserve_write_returns_objects_of_the_layout() -> None:
    l1 = L1Manager(1 << 20)
    result = l1.reserve_write([key(0), key(1)], [False, True], KV)
    assert errors(result) == [OK, OK]
    obj = result[key(0)][1]
    assert obj.get_shapes() == [torch.Size([4, 8])] and obj.get_dtypes() == [torch.float16]
    assert obj.get_size() == 64
    assert l1.memory_used_bytes() == 128
    assert key(0) in l1 and l1.num_objects() == 2


def test_per_key_layouts_and_argument_checks() -> None:
    l1 = L1Manager(1 << 20)
    result = l1.reserve_write([key(0), key(1)], False, [KV, L100])
    assert [o.get_size() for _, o in result.values()] == [64, 100]
    with pytest.raises(ValueError, match="2 keys, 1 is_temporary"):
        l1.reserve_write([key(2), key(3)], [False], KV)
    with pytest.raises(ValueError, match="1 layouts"):
        l1.reserve_write([key(2), key(3)], False, [KV])
    with pytest.raises(ValueError, match="more than once"):
        l1.reserve_write([key(4), key(4)], False, KV)
    with pytest.raises(ValueError, match="mode"):
        l1.reserve_write([key(5)], False, KV, mode="replace")
    with pytest.raises(ValueError, match="capacity_bytes"):
        L1Manager(-1)


def test_existing_keys_are_not_writable() -> None:
    l1 = L1Manager(1 << 20)
    l1.reserve_write([key(0)], False, KV)
    assert errors(l1.reserve_write([key(0), key(1)], False, KV)) == [TAKEN, OK]


def test_update_mode_replaces_only_unlocked_ready_objects() -> None:
    l1 = L1Manager(1 << 20)
    assert errors(l1.reserve_write([key(0)], False, KV, mode="update")) == [TAKEN]
    l1.reserve_write([key(0)], False, KV)
    assert errors(l1.reserve_write([key(0)], False, L100, mode="update")) == [TAKEN]  # locked
    l1.finish_write([key(0)])
    assert errors(l1.reserve_write([key(0)], False, L100, mode="update")) == [OK]
    assert l1.memory_used_bytes() == 100
    l1.finish_write([key(0)])
    assert errors(l1.reserve_write([key(0), key(1)], False, KV, mode="all")) == [OK, OK]
    assert l1.memory_used_bytes() == 128


def test_out_of_memory_is_per_key_and_disturbs_nothing() -> None:
    l1 = L1Manager(150)
    result = l1.reserve_write([key(0), key(1), key(2)], False, [KV, L100, KV])
    assert errors(result) == [OK, OOM, OK]
    assert result[key(1)][1] is None
    assert l1.memory_used_bytes() == 128
    assert key(1) not in l1


def test_write_then_read_lifecycle() -> None:
    l1 = L1Manager(1 << 20)
    l1.reserve_write([key(0)], False, KV)
    assert errors(l1.reserve_read([key(0)])) == [WRONG]  # still being written
    assert errors(l1.finish_write([key(0)])) == [OK]
    assert errors(l1.finish_write([key(0)])) == [WRONG]
    assert errors(l1.reserve_read([key(0), key(1)])) == [OK, MISSING]
    assert errors(l1.delete([key(0)])) == [WRONG]  # read-locked
    assert errors(l1.finish_read([key(0)])) == [OK]
    assert errors(l1.finish_read([key(0)])) == [WRONG]  # no lock left
    assert errors(l1.delete([key(0)])) == [OK]
    assert l1.memory_used_bytes() == 0 and l1.num_objects() == 0


def test_regular_objects_survive_their_last_reader() -> None:
    l1 = L1Manager(1 << 20)
    l1.reserve_write([key(0)], False, KV)
    l1.finish_write_and_reserve_read([key(0)], read_locks=2)
    assert l1.finish_read([key(0)])[key(0)][1] is not None
    assert l1.finish_read([key(0)])[key(0)][1] is not None
    assert key(0) in l1


def test_temporary_objects_die_with_their_last_reader() -> None:
    l1 = L1Manager(1 << 20)
    obj = l1.reserve_write([key(0)], True, L100)[key(0)][1]
    assert obj.metadata.fmt == MemoryFormat.BINARY_BUFFER
    assert errors(l1.finish_write_and_reserve_read([key(0)], read_locks=2)) == [OK]
    assert l1.finish_read([key(0)]) == {key(0): (OK, obj)}
    assert l1.finish_read([key(0)]) == {key(0): (OK, None)}
    assert key(0) not in l1
    assert l1.memory_used_bytes() == 0


def test_finish_write_and_delete() -> None:
    l1 = L1Manager(1 << 20)
    l1.reserve_write([key(0), key(1)], True, L100)
    l1.finish_write([key(1)])
    assert errors(l1.finish_write_and_delete([key(0), key(1), key(2)])) == [OK, WRONG, MISSING]
    assert l1.memory_used_bytes() == 100


def test_tagged_objects_are_invisible_to_other_tags() -> None:
    l1 = L1Manager(1 << 20)
    l1.reserve_write([key(0)], True, L100, tag="staging")
    assert errors(l1.finish_write([key(0)])) == [MISSING]
    assert errors(l1.finish_write_and_delete([key(0)])) == [MISSING]
    assert errors(l1.finish_write_and_reserve_read([key(0)], tag="staging")) == [OK]
    assert errors(l1.reserve_read([key(0)])) == [MISSING]
    assert errors(l1.delete([key(0)])) == [MISSING]
    assert errors(l1.finish_read([key(0)])) == [OK]  # the read-lock holder releases it
    assert l1.num_objects() == 0


def test_write_listeners_skip_temporaries_and_tagged_objects() -> None:
    l1 = L1Manager(1 << 20)
    seen: list[list[ObjectKey]] = []
    l1.add_write_listener(seen.append)
    l1.reserve_write([key(0), key(1)], [False, True], KV)
    l1.reserve_write([key(2)], False, KV, tag="x")
    l1.finish_write([key(0), key(1)])
    l1.finish_write([key(2)], tag="x")
    assert seen == [[key(0)]]


def test_bytes_are_accounted_per_cache_salt() -> None:
    l1 = L1Manager(1 << 20)
    l1.reserve_write([key(0, "a"), key(1, "a"), key(2, "b")], [False, True, False], KV)
    assert l1.memory_used_bytes_by_salt() == {"a": 128, "b": 64}
    assert l1.memory_used_bytes("a") == 128 and l1.memory_used_bytes("zzz") == 0
    l1.finish_write_and_delete([key(1, "a")])
    assert l1.memory_used_bytes_by_salt() == {"a": 64, "b": 64}
    l1.finish_write([key(0, "a"), key(2, "b")])
    l1.delete([key(0, "a"), key(2, "b")])
    assert l1.memory_used_bytes_by_salt() == {}


def test_temporary_buffers_are_reused_in_a_steady_stream() -> None:
    l1 = L1Manager(1 << 20)
    for cycle in range(20):
        keys = [key(100 * cycle + i) for i in range(4)]
        l1.reserve_write(keys, True, [KV, L100, KV, L100])
        l1.finish_write_and_delete(keys)
    stats = l1.pool_stats()
    assert stats.misses == 4  # only the first cycle allocated
    assert stats.hits == 19 * 4
    assert stats.hit_rate == pytest.approx(76 / 80)
    assert l1.memory_used_bytes() == 0


def test_pooled_buffers_never_push_the_footprint_over_capacity() -> None:
    l1 = L1Manager(200)
    l1.reserve_write([key(0), key(1)], True, L100)
    l1.finish_write_and_delete([key(0), key(1)])
    assert l1.pool_stats().cached_bytes == 200
    # a different size must still fit: the pool gives its free buffers back
    assert errors(l1.reserve_write([key(2), key(3)], True, KV)) == [OK, OK]
    assert l1.memory_used_bytes() + l1.pool_stats().cached_bytes <= 200


def test_pool_bound_is_respected() -> None:
    l1 = L1Manager(1 << 20, temp_pool_bytes=150)
    l1.reserve_write([key(0), key(1)], True, L100)
    l1.finish_write_and_delete([key(0), key(1)])
    assert l1.pool_stats().cached_bytes == 100


def test_concurrent_callers() -> None:
    l1 = L1Manager(1 << 20)
    failures: list[str] = []

    def worker(t: int) -> None:
        for i in range(200):
            keys = [key(t * 10_000 + i * 3 + j, salt=f"s{t % 2}") for j in range(3)]
            if errors(l1.reserve_write(keys, True, [KV, L100, KV])) != [OK] * 3:
                failures.append("reserve")
            if errors(l1.finish_write_and_reserve_read(keys)) != [OK] * 3:
                failures.append("finish")
            if errors(l1.finish_read(keys)) != [OK] * 3:
                failures.append("read")

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert l1.memory_used_bytes() == 0 and l1.memory_used_bytes_by_salt() == {}


OPS = st.lists(st.tuples(
    st.sampled_from(["reserve_tmp", "reserve", "finish", "finish_read_lock", "read", "unread",
                     "delete", "discard"]),
    st.integers(0, 5),
    st.sampled_from([0, 16, 64, 100])),
    max_size=60)


@settings(max_examples=60, deadline=None)
@given(OPS)
def test_random_sequences_match_a_reference_model(ops: list[tuple[str, int, int]]) -> None:
    """Every call's per-key result and the byte accounting agree with a simple model."""
    l1 = L1Manager(300)
    model: dict[int, dict] = {}  # key -> {size, temp, state, readers}

    def used() -> int:
        return sum(e["size"] for e in model.values())

    for op, k, size in ops:
        layout = MemoryLayoutDesc([[size]], [torch.uint8])
        entry = model.get(k)
        if op in ("reserve_tmp", "reserve"):
            got = errors(l1.reserve_write([key(k)], op == "reserve_tmp", layout))[0]
            if entry is not None:
                want = TAKEN
            elif used() + size > 300:
                want = OOM
            else:
                want = OK
                model[k] = {"size": size, "temp": op == "reserve_tmp", "state": "w",
                            "readers": 0}
        elif op in ("finish", "finish_read_lock"):
            call = l1.finish_write if op == "finish" else l1.finish_write_and_reserve_read
            got = errors(call([key(k)]))[0]
            want = MISSING if entry is None else WRONG if entry["state"] != "w" else OK
            if want is OK:
                entry["state"] = "r"
                entry["readers"] = 1 if op == "finish_read_lock" else 0
        elif op == "read":
            got = errors(l1.reserve_read([key(k)]))[0]
            want = MISSING if entry is None else WRONG if entry["state"] != "r" else OK
            if want is OK:
                entry["readers"] += 1
        elif op == "unread":
            got = errors(l1.finish_read([key(k)]))[0]
            want = (MISSING if entry is None
                    else WRONG if entry["state"] != "r" or entry["readers"] == 0 else OK)
            if want is OK:
                entry["readers"] -= 1
                if entry["temp"] and entry["readers"] == 0:
                    del model[k]
        elif op == "delete":
            got = errors(l1.delete([key(k)]))[0]
            want = (MISSING if entry is None
                    else WRONG if entry["state"] != "r" or entry["readers"] else OK)
            if want is OK:
                del model[k]
        else:
            got = errors(l1.finish_write_and_delete([key(k)]))[0]
            want = MISSING if entry is None else WRONG if entry["state"] != "w" else OK
            if want is OK:
                del model[k]
        assert got is want, (op, k, size)
        assert l1.memory_used_bytes() == used()
        assert l1.memory_used_bytes() + l1.pool_stats().cached_bytes <= 300


def test_reused_temporaries_come_back_clean() -> None:
    """A pooled temporary is handed out again un-narrowed, with its format restored."""
    l1 = L1Manager(1 << 20)
    first = l1.reserve_write([key(0)], True, L100)[key(0)][1]
    first.set_used_size(7)
    first.metadata.fmt = MemoryFormat.KV_TENSOR
    l1.finish_write_and_delete([key(0)])
    again = l1.reserve_write([key(1)], True, L100)[key(1)][1]
    assert again.raw_data.data_ptr() == first.raw_data.data_ptr()
    assert again.get_size() == 100 and again.metadata.fmt == MemoryFormat.BINARY_BUFFER
    l1.finish_write_and_delete([key(1)])
    other = l1.reserve_write([key(2)], True, MemoryLayoutDesc([[50]], [torch.float16]))[key(2)][1]
    assert other.raw_data.data_ptr() == first.raw_data.data_ptr()  # same bytes, new layout
    assert other.get_shapes() == [torch.Size([50])] and other.get_dtypes() == [torch.float16]
