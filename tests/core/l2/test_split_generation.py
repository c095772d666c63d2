"""Store generations of the split tier: unique ids, and V child keys that name them."""

from __future__ import annotations

import threading

import lmserde.l2 as l2
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from lmserde.keys import ObjectKey
from lmserde.l2 import GENERATION_BYTES, GenerationSource, derive_v_child_key, parse_v_child_key
from lmserde.l2.split.manifest import SplitTierManifest, SplitTierState


def test_a_source_never_repeats_across_threads() -> None:
    source = GenerationSource()
    seen: list[bytes] = []
    lock = threading.Lock()

    def draw() -> None:
        mine = [source() for _ in range(2000)]
        with lock:
            seen.extend(mine)

    threads = [threading.Thread(target=draw) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len(seen) == 8000 and len(set(seen)) == 8000
    assert all(len(g) == GENERATION_BYTES and g[:8] == source.host_id for g in seen)


def test_sources_of_two_hosts_differ_by_their_random_id() -> None:
    a, b = GenerationSource(), GenerationSource()
    assert a.host_id != b.host_id and a() != b()
    fixed = GenerationSource(b"\x01" * 8)
    assert fixed() == b"\x01" * 8 + (1).to_bytes(8, "big")
    assert fixed() == b"\x01" * 8 + (2).to_bytes(8, "big")
    with pytest.raises(ValueError, match="8 bytes"):
        GenerationSource(b"short")


@given(chunk=st.binary(max_size=40), salt=st.sampled_from(["", "t1"]),
       rank=st.integers(0, 2**31), generation=st.binary(min_size=16, max_size=16))
def test_v_child_keys_name_their_logical_key_and_generation(
        chunk: bytes, salt: str, rank: int, generation: bytes) -> None:
    logical = ObjectKey(chunk, "m", rank, 0, salt)
    assume(l2.parse_component_key(logical) is None)
    child = derive_v_child_key(logical, generation)
    assert parse_v_child_key(child) == (logical, generation)
    assert l2.parse_component_key(child) == (logical, "v")
    assert (child.model_name, child.kv_rank, child.cache_salt) == ("m", rank, salt)
    other = derive_v_child_key(logical, bytes(b ^ 1 for b in generation))
    assert other != child, "two stores never share a V child key"
    assert parse_v_child_key(l2.derive_component_key(logical, "k")) is None
    assert parse_v_child_key(l2.derive_component_key(logical, "v")) is None


def test_a_generation_is_sixteen_bytes() -> None:
    logical = ObjectKey(b"x", "m", 0)
    for bad in (b"", b"\x00" * 15, "0" * 16, None):
        with pytest.raises(ValueError, match="16 bytes"):
            derive_v_child_key(logical, bad)  # type: ignore[arg-type]


def test_the_manifest_names_the_displaced_store() -> None:
    m = SplitTierManifest()
    key = ObjectKey(b"k", "m", 0)
    g1, g2 = b"\x01" * 16, b"\x02" * 16
    first, displaced = m.register_store(key, g1)
    assert displaced is None and m.live_store(key) == g1 and m.complete_store(key) is None
    assert m.mark_complete(key, first) and m.complete_store(key) == g1
    second, displaced = m.register_store(key, g2)
    assert displaced == g1, "a re-store knows whose V half it displaces"
    assert m.complete_store(key) is None and m.live_store(key) == g2
    assert not m.mark_complete(key, first) and m.mark_complete(key, second)
    _, store = m.invalidate(key) or (0, None)
    assert store == g2 and m.lookup(key) is SplitTierState.INVALIDATED
    assert m.live_store(key) is None
    _, displaced = m.register_store(key, g1)
    assert displaced is None, "an invalidated entry's V half is its invalidator's to delete"
    assert m.begin_delete_store(key)[1] == g1
