"""``register_lmserde_serdes`` against LMCache's real serde registry."""

from __future__ import annotations

import pytest

pytest.importorskip("lmcache", reason="the interop session installs lmcache==0.5.6")

from lmserde import get_registered_serde_types
from lmserde.lmcache import LMCacheProcessorBridge, register_lmserde_serdes


def test_every_installed_serde_is_registered_without_replacing_lmcache_ones() -> None:
    import lmcache.v1.distributed.serde as theirs

    builtin = {"fp8", "aesgcm", "turboquant"} & set(theirs.get_registered_serde_types())
    assert builtin == {"fp8", "aesgcm", "turboquant"}
    report = register_lmserde_serdes()
    assert report.skipped == {}
    assert set(report.registered) == set(get_registered_serde_types())
    for ours, name in report.registered.items():
        assert name == (f"lmserde_{ours}" if ours in builtin else ours)
        assert name in theirs.get_registered_serde_types()
    processor = theirs.create_serde_processor(theirs.SerdeConfig(type="fp8", kwargs={}))
    try:
        assert not isinstance(processor, LMCacheProcessorBridge)  # LMCache's own fp8 stays
    finally:
        processor.close()


def test_registration_is_idempotent() -> None:
    import lmcache.v1.distributed.serde as theirs

    first = register_lmserde_serdes()
    before = list(theirs.get_registered_serde_types())
    second = register_lmserde_serdes()
    assert second.registered == first.registered
    assert theirs.get_registered_serde_types() == before


def test_lmcache_builds_bridged_processors_with_lmserde_validation() -> None:
    pytest.importorskip("lmserde_fp8")
    import lmcache.v1.distributed.serde as theirs

    name = register_lmserde_serdes().lmcache_name("fp8")
    processor = theirs.create_serde_processor(
        theirs.SerdeConfig(type=name, kwargs={"fp8_dtype": "float8_e5m2", "max_workers": 2}))
    try:
        assert isinstance(processor, LMCacheProcessorBridge)
        assert processor.serde_type == "fp8"
    finally:
        processor.close()
    with pytest.raises(ValueError, match="Did you mean 'fp8_dtype'"):
        theirs.create_serde_processor(theirs.SerdeConfig(type=name, kwargs={"fp8_dtyp": "x"}))


def test_multi_serdes_report_group_sizes_and_slot_mappings() -> None:
    pytest.importorskip("lmserde_asym_k16_v8")
    import lmcache.v1.distributed.serde as theirs

    name = register_lmserde_serdes().lmcache_name("asym_k16_v8")
    processor = theirs.create_serde_processor(theirs.SerdeConfig(type=name, kwargs={}))
    try:
        assert processor.serializer_group_size() == processor.deserializer_group_size() == 2
        assert processor.input_slot_mapping() == processor.output_slot_mapping() == (0, 1)
        assert processor.pad_to_estimate is True  # upper-bound output, padded for LMCache 0.5.6
    finally:
        processor.close()
