"""Prometheus export of serde wrappers: scraped values are the wrappers' live snapshots."""

from __future__ import annotations

import gc
import importlib
import sys
import urllib.request
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from datapath_driver import Cache, key_of, objects_for
from lmserde import MemoryLayoutDesc
from lmserde.l1 import L1Manager
from lmserde.l2 import L2AdapterInterface, create_l2_adapter, key_file_name
from lmserde.l2.serde.prometheus_export import (
    REJECTION_REASONS,
    register_wrapper,
    unregister_wrapper,
)
from prometheus_client import CollectorRegistry, generate_latest, start_http_server
from prometheus_client.parser import text_string_to_metric_families

KV = MemoryLayoutDesc([[16, 2, 32]], [torch.float16])

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def _samples(text: str) -> Samples:
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def wrapper(tmp_path: Path, l1: L1Manager) -> Iterator[L2AdapterInterface]:
    adapter = create_l2_adapter({"type": "fs", "base_path": str(tmp_path),
                                 "serde": {"type": "t_int8"}}, l1)
    yield adapter
    adapter.close()


def _traffic(wrapper: L2AdapterInterface, cache: Cache, tmp_path: Path) -> None:
    """Two stores, one corrupted object, one absent key."""
    keys = [key_of(i) for i in range(4)]
    assert cache.store(wrapper, keys[:3], objects_for(KV, 3)).is_successful()
    assert cache.store(wrapper, keys[3:], objects_for(KV, 1, seed=1)).is_successful()
    (tmp_path / key_file_name(keys[3])).write_bytes(b"")  # a short file: a miss
    bitmap, _ = cache.load(wrapper, [*keys, key_of(99)], KV)
    assert bitmap.to_list() == [True, True, True, False, False]


def _check_equal_to_snapshot(samples: Samples, wrapper: Any, adapter: str) -> None:
    snap = wrapper.metrics()
    lab = {"adapter": adapter, "serde": "t_int8"}
    assert _value(samples, "lmserde_wrapper_store_tasks_total", result="ok", **lab) \
        == snap["store_ok"] == 2
    assert _value(samples, "lmserde_wrapper_store_tasks_total", result="failed", **lab) \
        == snap["store_failed"] == 0
    assert _value(samples, "lmserde_wrapper_store_keys_total", **lab) == snap["store_keys"] == 4
    assert _value(samples, "lmserde_wrapper_load_tasks_total", **lab) == snap["load_tasks"] == 1
    assert _value(samples, "lmserde_wrapper_load_keys_total", **lab) == snap["load_keys"] == 5
    assert _value(samples, "lmserde_wrapper_load_hits_total", **lab) == snap["load_hits"] == 3
    assert _value(samples, "lmserde_wrapper_load_misses_total", **lab) == 2
    for form in ("kv", "serialized"):
        assert _value(samples, "lmserde_wrapper_store_bytes_total", form=form, **lab) \
            == snap[f"store_bytes_{form}"] > 0
        assert _value(samples, "lmserde_wrapper_load_bytes_total", form=form, **lab) \
            == snap[f"load_bytes_{form}"] > 0
    assert snap["store_bytes_kv"] != snap["store_bytes_serialized"]  # the forms differ
    assert snap["failures"]  # the short file and the absent key failed somewhere
    for stage, count in snap["failures"].items():
        assert _value(samples, "lmserde_wrapper_failures_total", stage=stage, **lab) == count
    exported_stages = {dict(k[1])["stage"] for k in samples
                       if k[0] == "lmserde_wrapper_failures_total"}
    assert exported_stages == set(snap["failures"])
    for stage, summary in snap["latency_seconds"].items():
        assert _value(samples, "lmserde_wrapper_stage_seconds_count", stage=stage, **lab) \
            == summary["count"]
        assert _value(samples, "lmserde_wrapper_stage_seconds_sum", stage=stage, **lab) \
            == pytest.approx(summary["total"])
    assert _value(samples, "lmserde_wrapper_healthy", **lab) == 1.0
    if "rejections" in snap:  # the fail-closed wrapper's reasons, each one exported
        for reason in {*REJECTION_REASONS, *snap["rejections"]}:
            assert _value(samples, "lmserde_wrapper_rejections_total", reason=reason, **lab) \
                == snap["rejections"].get(reason, 0)


def test_scraped_text_equals_the_wrapper_snapshot(
    wrapper: L2AdapterInterface, cache: Cache, tmp_path: Path, registry: CollectorRegistry
) -> None:
    register_wrapper(wrapper, name="kv-fs", registry=registry)
    _traffic(wrapper, cache, tmp_path)
    text = generate_latest(registry).decode()
    assert "# TYPE lmserde_wrapper_load_hits_total counter" in text
    _check_equal_to_snapshot(_samples(text), wrapper, "kv-fs")


def test_every_scrape_reads_the_live_values(
    wrapper: L2AdapterInterface, cache: Cache, tmp_path: Path, registry: CollectorRegistry
) -> None:
    register_wrapper(wrapper, registry=registry)  # default name: the inner adapter's type
    before = _samples(generate_latest(registry).decode())
    assert _value(before, "lmserde_wrapper_load_keys_total", adapter="fs", serde="t_int8") == 0
    _traffic(wrapper, cache, tmp_path)
    _check_equal_to_snapshot(_samples(generate_latest(registry).decode()), wrapper, "fs")


def test_an_http_scrape_on_loopback(
    wrapper: L2AdapterInterface, cache: Cache, tmp_path: Path, registry: CollectorRegistry
) -> None:
    register_wrapper(wrapper, name="kv-fs", registry=registry)
    _traffic(wrapper, cache, tmp_path)
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        port = server.server_address[1]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
            assert response.status == 200
            text = response.read().decode()
    finally:
        server.shutdown()
        server.server_close()
        thread.join(30)
    _check_equal_to_snapshot(_samples(text), wrapper, "kv-fs")


def test_closed_or_collected_wrappers_disappear(
    tmp_path: Path, l1: L1Manager, registry: CollectorRegistry
) -> None:
    adapters = [create_l2_adapter({"type": "memory", "serde": {"type": "t_int8"}}, l1)
                for _ in range(2)]
    collector = register_wrapper(adapters[0], name="a", registry=registry)
    register_wrapper(adapters[1], name="b", registry=registry)
    assert collector.exported() == [("a", "t_int8"), ("b", "t_int8")]
    adapters[0].close()
    text = generate_latest(registry).decode()
    assert 'adapter="a"' not in text and 'adapter="b"' in text
    assert collector.exported() == [("b", "t_int8")]
    ref = weakref.ref(adapters[1])
    adapters[1].close()
    del adapters
    gc.collect()
    assert ref() is None  # the exporter holds no strong reference
    assert collector.exported() == []
    assert "lmserde_wrapper" not in generate_latest(registry).decode()


def test_names_must_be_distinct_and_unregister_stops_the_export(
    tmp_path: Path, l1: L1Manager, registry: CollectorRegistry
) -> None:
    a = create_l2_adapter({"type": "memory", "serde": {"type": "t_int8"}}, l1)
    b = create_l2_adapter({"type": "memory", "serde": {"type": "t_int8"}}, l1)
    try:
        collector = register_wrapper(a, registry=registry)
        assert register_wrapper(a, registry=registry) is collector  # again: nothing changes
        with pytest.raises(ValueError, match="distinct name"):
            register_wrapper(b, registry=registry)
        register_wrapper(b, name="memory-2", registry=registry)
        assert collector.exported() == [("memory", "t_int8"), ("memory-2", "t_int8")]
        assert unregister_wrapper(a, registry=registry) is True
        assert unregister_wrapper(a, registry=registry) is False
        assert collector.exported() == [("memory-2", "t_int8")]
        with pytest.raises(TypeError, match="serde-wrapped"):
            register_wrapper(object(), registry=registry)
    finally:
        a.close()
        b.close()


class _SnapshotSource:
    """Stands in for a wrapper with given snapshot and status dicts (the keys the fail-closed
    wrapper adds: ``rejections``, ``repaired``; and one whose snapshot raises)."""

    serde_type = "fixed"

    def __init__(self, snapshot: dict[str, Any] | None, healthy: bool = True) -> None:
        self._snapshot = snapshot
        self._healthy = healthy

    def metrics(self) -> dict[str, Any]:
        if self._snapshot is None:
            raise RuntimeError("snapshot failed")
        return self._snapshot

    def report_status(self) -> dict[str, Any]:
        return {"is_healthy": self._healthy}


def test_rejections_repairs_and_health_are_exported(registry: CollectorRegistry) -> None:
    source = _SnapshotSource({"load_keys": 9, "load_hits": 4,
                              "rejections": {"checksum": 3, "key": 1, "novel": 2},
                              "repaired": 5}, healthy=False)
    broken = _SnapshotSource(None)
    plain = _SnapshotSource({"load_keys": 1, "load_hits": 1})
    register_wrapper(source, name="s", registry=registry)
    register_wrapper(broken, name="broken", registry=registry)
    register_wrapper(plain, name="plain", registry=registry)
    samples = _samples(generate_latest(registry).decode())  # the broken one does not fail it
    lab = {"adapter": "s", "serde": "fixed"}
    expected = {reason: 0 for reason in REJECTION_REASONS} | {"checksum": 3, "key": 1, "novel": 2}
    for reason, count in expected.items():
        assert _value(samples, "lmserde_wrapper_rejections_total", reason=reason, **lab) == count
    assert _value(samples, "lmserde_wrapper_repaired_total", **lab) == 5
    assert _value(samples, "lmserde_wrapper_healthy", **lab) == 0.0
    assert _value(samples, "lmserde_wrapper_load_misses_total", **lab) == 5
    adapters = {dict(k[1]).get("adapter") for k in samples}
    assert adapters == {"s", "plain"}
    plain_rejections = [k for k in samples if k[0] == "lmserde_wrapper_rejections_total"
                        and dict(k[1])["adapter"] == "plain"]
    assert plain_rejections == []  # a wrapper that does not count rejections claims none


def test_without_prometheus_client_the_error_says_how_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in [m for m in sys.modules if m.startswith("prometheus_client")]:
        monkeypatch.setitem(sys.modules, name, None)  # as if it were not installed
    monkeypatch.delitem(sys.modules, "lmserde.l2.serde.prometheus_export")
    module = importlib.import_module("lmserde.l2.serde.prometheus_export")  # importing still works
    with pytest.raises(ImportError, match=r"pip install 'lmserde\[prometheus\]'"):
        module.register_wrapper(object())
    with pytest.raises(ImportError, match="prometheus_client"):
        module.WrapperCollector()
