"""The serde spec's declared placement is the one decider of the split tier (issue 28, item 3).

``create_l2_adapter`` builds a :class:`SplitTierL2Adapter` for a serde whose spec declares
``StoragePlacementMode.KV_SPLIT_TIER`` and a serde wrapper otherwise, whatever the serde is named;
the slot mapping is only checked against the declaration when the adapter is built.
"""

from __future__ import annotations

from pathlib import Path

import lmserde.l2 as l2
import pytest
from lmserde import (
    SerdeProcessor,
    SerdeSizeContract,
    SerdeSpec,
    StoragePlacementMode,
    get_serde_spec,
)
from lmserde.l1 import L1Manager
from lmserde.l2 import SerdeL2AdapterWrapper, SplitTierConfigError, SplitTierL2Adapter
from lmserde.serde_build import resolve_serde
from split_serdes import key, kv_object, same, sentinel_object, v_only_serde_registered

SPLIT, TOGETHER = StoragePlacementMode.KV_SPLIT_TIER, StoragePlacementMode.KV_TOGETHER


def _never_built(kwargs: dict[str, object]) -> SerdeProcessor:
    raise AssertionError("a spec's placement is read without building the serde")


def fs_spec(base: Path, serde: str) -> dict[str, object]:
    return {"type": "fs", "base_path": str(base), "serde": {"type": serde}}


def test_a_third_party_serde_declaring_split_tier_gets_the_split_tier(tmp_path: Path) -> None:
    l1 = L1Manager(16 << 20)
    with v_only_serde_registered("acme_keys_stay_home") as name:
        adapter = l2.create_l2_adapter(fs_spec(tmp_path, name), l1)
        try:
            assert isinstance(adapter, SplitTierL2Adapter)
            assert adapter.report_status()["placement"] == "kv_split_tier"
            assert l2.store_sync(adapter, [key(1)], [kv_object(1)]).is_successful()
            assert adapter.holds_k(key(1))  # K kept in L1, not written to fs
            out = sentinel_object()
            assert l2.load_sync(adapter, [key(1)], [out]).count() == 1
            assert same(out, kv_object(1))
        finally:
            adapter.close()
    assert l1.memory_used_bytes() == 0


def test_a_name_ending_in_v_only_does_not_make_a_split_tier(tmp_path: Path) -> None:
    with v_only_serde_registered("acme_v_only", placement=TOGETHER, mapping=(0, 1)) as name:
        adapter = l2.create_l2_adapter(fs_spec(tmp_path, name), L1Manager(16 << 20))
        try:
            assert type(adapter) is SerdeL2AdapterWrapper
        finally:
            adapter.close()


def test_declared_split_tier_with_a_mapping_that_keeps_k_is_refused(tmp_path: Path) -> None:
    l1 = L1Manager(16 << 20)
    with v_only_serde_registered("acme_split", mapping=(0, 1)) as name, \
            pytest.raises(SplitTierConfigError,
                          match="'acme_split' declares split-tier placement.*got \\(0, 1\\)"):
        l2.create_l2_adapter(fs_spec(tmp_path, name), l1)
    assert l1.memory_used_bytes() == 0 and l1.num_objects() == 0
    # nothing was claimed: the L1 cache takes a split-tier adapter afterwards
    with v_only_serde_registered() as name:
        l2.create_l2_adapter(fs_spec(tmp_path, name), l1).close()


def test_a_mapping_that_leaves_k_out_must_be_declared(tmp_path: Path) -> None:
    """Not a second decider: an undeclared V-only serde is refused, never silently split (nor
    wrapped, which would store half of each object)."""
    with v_only_serde_registered("acme_undeclared", placement=TOGETHER) as name, \
            pytest.raises(SplitTierConfigError,
                          match="'acme_undeclared'.*\\(None, 1\\) leaves a group.*KV_SPLIT_TIER"):
        l2.create_l2_adapter(fs_spec(tmp_path, name), L1Manager(16 << 20))


def test_a_split_tier_serde_in_a_chain_is_refused_whatever_its_name(tmp_path: Path) -> None:
    with v_only_serde_registered("acme_keys_stay_home") as name, \
            pytest.raises(SplitTierConfigError, match="acme_keys_stay_home.*cannot be part of"):
        l2.create_l2_adapter({"type": "fs", "base_path": str(tmp_path),
                              "serde": [{"type": "identity"}, {"type": name}]},
                             L1Manager(16 << 20))


def test_placement_defaults_to_whole_objects_and_is_checked() -> None:
    spec = SerdeSpec(factory=_never_built)
    assert spec.placement is TOGETHER
    assert get_serde_spec("identity").placement is TOGETHER
    with pytest.raises(TypeError, match="StoragePlacementMode"):
        SerdeSpec(factory=_never_built, placement="kv_split_tier")  # type: ignore[arg-type]


def test_placement_is_not_part_of_the_serde_identity() -> None:
    """Declaring a placement changes no config fingerprint: stored objects stay readable."""
    with v_only_serde_registered("acme_a", placement=SPLIT), \
            v_only_serde_registered("acme_b", placement=TOGETHER):
        a, b = resolve_serde({"type": "acme_a"}), resolve_serde({"type": "acme_b"})
        assert {**a.identity_config(), "type": "x"} == {**b.identity_config(), "type": "x"}
    spec = SerdeSpec(factory=_never_built, size_contract=SerdeSizeContract.EXACT)
    split = SerdeSpec(factory=_never_built, size_contract=SerdeSizeContract.EXACT,
                      placement=SPLIT)
    assert spec.identity_config("t", {"o": 1}) == split.identity_config("t", {"o": 1})
