"""Adapter specs: discovery of adapter types, spec parsing, serde sub-dicts and chains."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest
from lmserde import AsyncSerdeProcessor, PluginLoadError, SerdeConfig
from lmserde.identity import IdentityDeserializer, IdentitySerializer
from lmserde.l1 import L1Manager
from lmserde.l2 import (
    L2_ADAPTER_GROUP,
    FaultInjectingL2Adapter,
    FSL2Adapter,
    L2AdapterSpec,
    MemoryL2Adapter,
    SerdeL2AdapterWrapper,
    create_l2_adapter,
    get_l2_adapter_spec,
    get_registered_l2_adapter_types,
    list_l2_adapters,
    parse_l2_adapter_spec,
    parse_serde_config,
    register_l2_adapter_type,
    rescan_l2_adapter_plugins,
    unregister_l2_adapter_type,
)
from lmserde.registry import register_serde_factory, unregister_serde_factory
from lmserde.spec import SerdeSizeContract


@pytest.fixture
def l1() -> L1Manager:
    return L1Manager(1 << 24)


@pytest.fixture
def rescan() -> Iterator[None]:
    rescan_l2_adapter_plugins()
    yield
    rescan_l2_adapter_plugins()


def test_builtin_types_come_from_core_entry_points() -> None:
    names = {ep.name for ep in entry_points(group=L2_ADAPTER_GROUP)}
    assert {"memory", "fs", "fault"} <= names
    assert {"memory", "fs", "fault"} <= set(get_registered_l2_adapter_types())
    assert get_l2_adapter_spec("fs").reports_object_sizes is True
    assert get_l2_adapter_spec("fault").reports_object_sizes is None
    infos = {i.name: i for i in list_l2_adapters(load=True)}
    assert infos["fs"].distribution == "lmserde" and infos["fs"].error is None
    assert "file" in infos["fs"].description.lower()


def test_unknown_type_lists_the_known_ones(l1: L1Manager) -> None:
    with pytest.raises(ValueError, match=r"Unknown L2 adapter type 'nosuchstore'\. Registered: .*fault, "
                                         r"fs, memory"):
        create_l2_adapter({"type": "nosuchstore"}, l1)
    with pytest.raises(ValueError, match="must include a 'type' field.*fs"):
        create_l2_adapter({"base_path": "/x"}, l1)
    with pytest.raises(ValueError, match="must be a dict, got list"):
        create_l2_adapter(["fs"], l1)  # type: ignore[arg-type]


def test_adapter_options_are_validated(tmp_path: Path, l1: L1Manager) -> None:
    with pytest.raises(ValueError, match="Unknown option 'bas_path' for L2 adapter 'fs'.*"
                                         "Did you mean 'base_path'"):
        create_l2_adapter({"type": "fs", "bas_path": str(tmp_path)}, l1)
    with pytest.raises(ValueError, match="L2 adapter 'fs' requires option 'base_path'"):
        create_l2_adapter({"type": "fs"}, l1)
    with pytest.raises(ValueError, match="io_workers"):
        create_l2_adapter({"type": "fs", "base_path": str(tmp_path), "io_workers": 0}, l1)
    with pytest.raises(ValueError, match="load_miss_rate"):
        create_l2_adapter({"type": "fault", "inner": {"type": "memory"},
                           "load_miss_rate": 2}, l1)
    with pytest.raises(ValueError, match="'inner' must be an adapter spec dict"):
        create_l2_adapter({"type": "fault", "inner": "memory"}, l1)
    adapter = create_l2_adapter({"type": "fs", "base_path": str(tmp_path), "io_workers": 3,
                                 "fsync": "true"}, l1)
    try:
        assert isinstance(adapter, FSL2Adapter)
        assert adapter.report_status()["fsync"] is True
    finally:
        adapter.close()


def test_serde_sub_dict_parsing_upstream_texts() -> None:
    assert parse_l2_adapter_spec({"type": "fs", "base_path": "/x"}).serde_config is None
    config = parse_l2_adapter_spec(
        {"type": "fs", "base_path": "/x", "serde": {"type": "fp8", "fp8_dtype": "float8_e4m3fn"}})
    assert config.serde_config == SerdeConfig("fp8", {"fp8_dtype": "float8_e4m3fn"})
    assert config.options == {"base_path": "/x"}
    with pytest.raises(ValueError, match="'serde' must be a dict, got str"):
        parse_serde_config("fp8")
    with pytest.raises(ValueError, match="'serde' dict must include a 'type' field"):
        parse_serde_config({"fp8_dtype": "x"})
    with pytest.raises(ValueError, match="'serde' dict must include a 'type' field"):
        parse_serde_config({"type": 3})
    assert parse_serde_config([{"type": "a"}, {"type": "b", "k": 1}]) == [
        SerdeConfig("a"), SerdeConfig("b", {"k": 1})]
    assert parse_serde_config([{"type": "a"}]) == SerdeConfig("a")
    with pytest.raises(ValueError, match="at least one serde"):
        parse_serde_config([])
    with pytest.raises(ValueError, match="'serde' must be a dict, got int"):
        parse_serde_config([{"type": "a"}, 5])


def test_create_wraps_only_with_a_serde(tmp_path: Path, l1: L1Manager) -> None:
    plain = create_l2_adapter({"type": "memory"}, l1)
    wrapped = create_l2_adapter({"type": "fault", "inner": {"type": "fs",
                                 "base_path": str(tmp_path)}, "serde": {"type": "identity"}}, l1)
    try:
        assert isinstance(plain, MemoryL2Adapter)
        assert isinstance(wrapped, SerdeL2AdapterWrapper)
        assert isinstance(wrapped.inner_adapter, FaultInjectingL2Adapter)
        assert isinstance(wrapped.inner_adapter.inner_adapter, FSL2Adapter)
        assert wrapped.size_contract is SerdeSizeContract.EXACT
    finally:
        plain.close()
        wrapped.close()
    with pytest.raises(ValueError, match="needs an L1Manager"):
        create_l2_adapter({"type": "memory", "serde": {"type": "identity"}})


def test_failed_builds_leak_nothing(l1: L1Manager) -> None:
    before = set(threading.enumerate())
    with pytest.raises(ValueError, match="Unknown serde type 'nope'"):
        create_l2_adapter({"type": "fault", "inner": {"type": "memory"},
                           "serde": {"type": "nope"}}, l1)
    with pytest.raises(ValueError, match="Unknown option 'levle'"):
        create_l2_adapter({"type": "memory", "serde": [{"type": "identity"},
                                                       {"type": "identity", "levle": 1}]}, l1)
    for t in set(threading.enumerate()) - before:
        t.join(10)
    assert set(threading.enumerate()) - before == set()


class _NoSizes(MemoryL2Adapter):
    adapter_type = "nosizes-test"

    def reports_object_sizes(self) -> bool:
        return False


def test_programmatic_types_and_the_pairing_rule(l1: L1Manager) -> None:
    register_l2_adapter_type("nosizes-test", lambda options, l1m: _NoSizes(),
                             description="test", reports_object_sizes=False)
    register_serde_factory(
        "upper-test", lambda kw: AsyncSerdeProcessor(IdentitySerializer(),
                                                     IdentityDeserializer()))
    try:
        with pytest.raises(ValueError, match="already registered: 'nosizes-test'"):
            register_l2_adapter_type("nosizes-test", lambda o, m: _NoSizes())
        with pytest.raises(ValueError, match="already registered: 'fs'"):
            register_l2_adapter_type("fs", lambda o, m: _NoSizes())
        assert "nosizes-test" in get_registered_l2_adapter_types()
        with pytest.raises(ValueError, match="Upper-bound serde output requires the filesystem "
                                             "adapter's actual-used-length load contract; "
                                             "unsupported pairing.*upper-test on nosizes-test"):
            create_l2_adapter({"type": "nosizes-test", "serde": {"type": "upper-test"}}, l1)
        exact = create_l2_adapter({"type": "nosizes-test", "serde": {"type": "identity"}}, l1)
        exact.close()
        upper = create_l2_adapter({"type": "memory", "serde": {"type": "upper-test"}}, l1)
        upper.close()
    finally:
        unregister_l2_adapter_type("nosizes-test")
        unregister_serde_factory("upper-test")
    with pytest.raises(ValueError, match="not registered programmatically"):
        unregister_l2_adapter_type("fs")


PLUGIN = '''
from lmserde.l2 import L2AdapterSpec, MemoryL2Adapter
from lmserde.options import SerdeOption


class TinyAdapter(MemoryL2Adapter):
    adapter_type = "tiny"


SPEC = L2AdapterSpec(
    factory=lambda options, l1: TinyAdapter(options["limit"]),
    description="a tiny in-memory adapter from a plugin",
    options=(SerdeOption("limit", int, 1024, "capacity"),),
    reports_object_sizes=True,
)
'''


def test_third_party_adapter_types_are_discovered(plugin_site: Callable[..., Path],
                                                  rescan: None, l1: L1Manager) -> None:
    plugin_site("acme-l2-tiny", "2.0",
                entry_points={L2_ADAPTER_GROUP: {"tiny": "lmserde_testplugin_tiny:SPEC",
                                                 "broken": "lmserde_testplugin_broken:SPEC"}},
                modules={"lmserde_testplugin_tiny": PLUGIN,
                         "lmserde_testplugin_broken": "raise ImportError('missing dep')"})
    rescan_l2_adapter_plugins()
    adapter = create_l2_adapter({"type": "tiny", "limit": 2048, "serde": {"type": "identity"}},
                                l1)
    try:
        assert adapter.adapter_type == "tiny"
        assert adapter.inner_adapter.max_capacity_bytes == 2048
    finally:
        adapter.close()
    with pytest.raises(PluginLoadError, match="'broken' from distribution acme-l2-tiny 2.0"):
        create_l2_adapter({"type": "broken"}, l1)
    infos = {i.name: i for i in list_l2_adapters(load=True)}
    assert infos["broken"].error is not None and "missing dep" in infos["broken"].error
    assert infos["tiny"].error is None and infos["tiny"].reports_object_sizes is True
    fs = create_l2_adapter({"type": "memory"}, l1)  # the other types still work
    fs.close()


def test_spec_objects() -> None:
    spec = L2AdapterSpec.from_entry_object(lambda options, l1: MemoryL2Adapter())
    assert spec.options is None and spec.validate("x", {"anything": 1}) == {"anything": 1}
    with pytest.raises(TypeError, match="L2AdapterSpec or a factory"):
        L2AdapterSpec.from_entry_object(42)
    built = get_l2_adapter_spec("memory").factory({"max_capacity_bytes": 0}, None)
    assert isinstance(built, MemoryL2Adapter)
    built.close()
    opts: dict[str, Any] = get_l2_adapter_spec("memory").validate("memory", {})
    assert opts == {"max_capacity_bytes": 0}
