"""Split-tier building blocks: declared placement, child keys, the manifest, L1 delete listeners."""

from __future__ import annotations

import lmserde.l2.build as l2
import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st
from lmserde import MemoryLayoutDesc, ObjectKey, SerdeConfig
from lmserde.l1 import L1Error, L1Manager
from lmserde.l2 import (
    L2AdapterConfig,
    SplitTierConfigError,
    SplitTierManifest,
    SplitTierState,
    StoragePlacementMode,
    check_split_tier_specs,
    derive_component_key,
    derive_storage_placement_mode,
    parse_component_key,
)
from lmserde.l2.split.placement import check_whole_object_slots
from split_serdes import v_only_serde_registered

SPLIT, TOGETHER = StoragePlacementMode.KV_SPLIT_TIER, StoragePlacementMode.KV_TOGETHER


# -- placement ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("config", "mode"), [
    (SerdeConfig("asym_k16_v8_v_only"), SPLIT),
    (SerdeConfig("asym_k16_v8"), TOGETHER),
    (SerdeConfig("fp8"), TOGETHER),
    ({"type": "fs", "base_path": "/x", "serde": {"type": "asym_k16_v8_v_only"}}, SPLIT),
    ({"type": "fs", "base_path": "/x", "serde": {"type": "fp8"}}, TOGETHER),
    ({"type": "fs", "base_path": "/x"}, TOGETHER),
    (L2AdapterConfig("fs", {}, SerdeConfig("asym_k16_v8_v_only")), SPLIT),
    (L2AdapterConfig("fs", {}, [SerdeConfig("fp8"), SerdeConfig("zstd")]), TOGETHER),
    (L2AdapterConfig("fs", {}, None), TOGETHER),
])
def test_placement_is_derived_from_the_serde_config(config: object, mode: StoragePlacementMode
                                                    ) -> None:
    assert derive_storage_placement_mode([config]) is mode


def test_placement_of_several_configs_is_split_if_any_is() -> None:
    assert derive_storage_placement_mode(
        [SerdeConfig("fp8"), SerdeConfig("asym_k16_v8_v_only")]) is SPLIT
    assert derive_storage_placement_mode([]) is TOGETHER


def test_placement_is_what_the_spec_declares_whatever_the_name() -> None:
    """No name rule: a serde named ``*_v_only`` that declares ``KV_TOGETHER`` stores whole
    objects, and one declaring ``KV_SPLIT_TIER`` under any name is split-tier."""
    with v_only_serde_registered("acme_keys_stay_home"):
        assert derive_storage_placement_mode([SerdeConfig("acme_keys_stay_home")]) is SPLIT
        assert derive_storage_placement_mode(
            [{"type": "fs", "serde": [{"type": "fp8"}, {"type": "acme_keys_stay_home"}]}]) is SPLIT
    with v_only_serde_registered("acme_v_only", placement=TOGETHER, mapping=(0, 1)):
        assert derive_storage_placement_mode([SerdeConfig("acme_v_only")]) is TOGETHER


def test_an_unknown_serde_declares_no_placement() -> None:
    """Building it reports the unknown type; the placement query does not guess from its name."""
    assert derive_storage_placement_mode([SerdeConfig("no_such_serde_v_only")]) is TOGETHER
    with pytest.raises(ValueError, match="no_such_serde_v_only"):
        l2.check_serde_config(SerdeConfig("no_such_serde_v_only"))


@pytest.mark.parametrize(("mapping", "refused"), [
    (None, False), ((0, 1), False), ((0, None, 1), False), ((None, 1), True), ((0, None), True),
])
def test_a_whole_object_serde_must_cover_every_group(mapping: tuple[int | None, ...] | None,
                                                     refused: bool) -> None:
    """Absent slots are refused for ``KV_TOGETHER`` only when the present ones leave a (K, V)
    group out (the wrapper would store half the object)."""

    class Slots:
        def input_slot_mapping(self) -> tuple[int | None, ...] | None:
            return mapping

    if not refused:
        check_whole_object_slots(Slots(), "t")  # type: ignore[arg-type]
        return
    with pytest.raises(SplitTierConfigError, match="'t'.*leaves a group.*declares placement "
                                                   "KV_TOGETHER.*KV_SPLIT_TIER in its SerdeSpec"):
        check_whole_object_slots(Slots(), "t")  # type: ignore[arg-type]


def test_a_split_tier_adapter_must_be_the_only_l2_adapter() -> None:
    split = {"type": "fs", "base_path": "/a", "serde": {"type": "asym_k16_v8_v_only"}}
    check_split_tier_specs([split])
    check_split_tier_specs([{"type": "fs", "base_path": "/a"}, {"type": "memory"}])
    with pytest.raises(SplitTierConfigError, match="exactly one L2 adapter.*#1 'fs'"):
        check_split_tier_specs([{"type": "memory"}, split])
    nested = {"type": "fault", "inner": split}
    with pytest.raises(SplitTierConfigError, match="#0 'fault'"):
        check_split_tier_specs([nested, {"type": "memory"}])


# -- child keys -----------------------------------------------------------------------------------


def test_child_keys_are_distinct_and_keep_tenant_model_and_rank() -> None:
    logical = ObjectKey(b"\x00" * 32, "contract-test", 0x02010201, 0, "tenant-b")
    k, v = derive_component_key(logical, "k"), derive_component_key(logical, "v")
    assert len({logical, k, v}) == 3
    for child in (k, v):
        assert (child.model_name, child.kv_rank, child.object_group_id, child.cache_salt) == (
            "contract-test", 0x02010201, 0, "tenant-b")
    assert parse_component_key(k) == (logical, "k")
    assert parse_component_key(v) == (logical, "v")
    assert parse_component_key(logical) is None
    with pytest.raises(ValueError, match="'k' or 'v'"):
        derive_component_key(logical, "x")


@given(chunk=st.binary(min_size=0, max_size=40), salt=st.sampled_from(["", "t1", "tenant-\u00e9"]),
       rank=st.integers(0, 2**31), component=st.sampled_from(["k", "v"]))
def test_child_keys_map_back_to_their_logical_key(chunk: bytes, salt: str, rank: int,
                                                  component: str) -> None:
    logical = ObjectKey(chunk, "m", rank, 0, salt)
    # a logical hash ending with a child marker would read as a child (digests never do)
    assume(parse_component_key(logical) is None)
    child = derive_component_key(logical, component)
    assert parse_component_key(child) == (logical, component)
    assert child != logical


# -- manifest -------------------------------------------------------------------------------------


def test_manifest_lifecycle() -> None:
    m = SplitTierManifest()
    key = ObjectKey(b"k1", "m", 0)
    assert m.lookup(key) is None and not m.is_complete(key)
    m.register_pending(key)
    assert m.lookup(key) is SplitTierState.STORE_IN_FLIGHT and not m.is_complete(key)
    assert m.mark_complete(key)
    assert m.is_complete(key) and m.complete_keys() == [key]
    m.mark_invalidated(key)
    assert m.lookup(key) is SplitTierState.INVALIDATED and not m.is_complete(key)
    assert not m.mark_complete(key), "an invalidated key cannot become complete"
    gen = m.begin_delete(key)
    assert m.lookup(key) is SplitTierState.DELETE_IN_FLIGHT
    assert m.forget(key, gen) and m.lookup(key) is None and len(m) == 0


def test_generations_stop_a_superseded_store_from_completing() -> None:
    m = SplitTierManifest()
    key = ObjectKey(b"k2", "m", 0)
    first = m.register_pending(key)
    second = m.register_pending(key)  # a newer store of the same key
    assert second > first
    assert not m.mark_complete(key, first)
    assert m.mark_complete(key, second)
    deleting = m.begin_delete(key)
    pending = m.register_pending(key)  # stored again while the delete runs
    assert not m.forget(key, deleting), "the delete must not drop the newer store's entry"
    assert m.lookup(key) is SplitTierState.STORE_IN_FLIGHT and m.generation(key) == pending


def test_invalidation_only_from_listed_states() -> None:
    m = SplitTierManifest()
    key = ObjectKey(b"k3", "m", 0)
    m.register_pending(key)
    assert m.mark_invalidated(key, only_from=(SplitTierState.COMPLETE,)) is None
    assert m.lookup(key) is SplitTierState.STORE_IN_FLIGHT
    m.mark_complete(key)
    assert m.mark_invalidated(key, only_from=(SplitTierState.COMPLETE,)) is not None
    assert m.counts()["invalidated"] == 1


# -- L1 delete listener ---------------------------------------------------------------------------


def test_l1_delete_listener_reports_removed_keys_and_tag() -> None:
    l1 = L1Manager(1 << 20)
    layout = MemoryLayoutDesc([[64]], [torch.uint8])
    keys = [ObjectKey(bytes([i]), "m", 0) for i in range(3)]
    l1.reserve_write(keys, False, layout, tag="t")
    l1.finish_write(keys, tag="t")
    seen: list[tuple[list[ObjectKey], str]] = []

    def broken(keys: list[ObjectKey], tag: str) -> None:
        raise RuntimeError("listener bug")

    l1.add_delete_listener(broken)
    l1.add_delete_listener(lambda k, t: seen.append((k, t)))
    l1.reserve_read([keys[2]], tag="t")  # locked: refused, not reported
    result = l1.delete(keys, tag="t")
    assert result[keys[0]][0] is L1Error.SUCCESS and result[keys[2]][0] is L1Error.KEY_IN_WRONG_STATE
    assert seen == [([keys[0], keys[1]], "t")], "a raising listener must not stop the others"
    l1.finish_read([keys[2]])
    l1.remove_delete_listener(broken)
    l1.delete([keys[2]], tag="t")
    assert seen[-1] == ([keys[2]], "t") and l1.memory_used_bytes() == 0
    l1.delete([keys[2]], tag="t")  # nothing removed: no call
    assert len(seen) == 2
