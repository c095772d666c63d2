"""The ``redis`` adapter type: discovery as a plugin, and validation of its spec."""

from __future__ import annotations

import json
from typing import Any

import pytest
from lmserde.cli.main import main as lmserde_main
from lmserde.l2 import create_l2_adapter, get_l2_adapter_spec, list_l2_adapters
from lmserde_redis import REDIS_ADAPTER_SPEC, ClusterEndpoint, RedisL2Adapter, parse_cluster_nodes


def test_discovered_through_the_entry_point_group() -> None:
    assert get_l2_adapter_spec("redis") is REDIS_ADAPTER_SPEC
    info = {i.name: i for i in list_l2_adapters(load=True)}["redis"]
    assert (info.distribution, info.status, info.error) == ("lmserde-redis", "loaded", None)
    assert info.reports_object_sizes is True


def test_listed_by_lmserde_plugins(capsys: pytest.CaptureFixture[str]) -> None:
    assert lmserde_main(["plugins", "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    rows = {r["name"]: r for r in listing["l2_adapters"]}
    assert rows["redis"]["distribution"] == "lmserde-redis"
    assert {"memory", "fs", "fault"} <= set(rows)


def _build(**fields: Any) -> RedisL2Adapter:
    adapter = create_l2_adapter({"type": "redis", **fields})
    assert isinstance(adapter, RedisL2Adapter)
    return adapter


def test_url_spec_builds_without_touching_the_network() -> None:
    adapter = _build(url="redis://127.0.0.1:1/0", namespace="x", io_workers=2,
                     socket_timeout=1, ttl_seconds=2.5)
    try:
        assert adapter.namespace == "x"
        status = adapter.report_status()
        assert status["mode"] == "standalone"
        assert status["endpoint"] == "redis://127.0.0.1:1/0"
        assert status["ttl_seconds"] == 2.5
    finally:
        adapter.close()


def test_status_never_shows_credentials() -> None:
    adapter = _build(url="redis://user:s3cret@127.0.0.1:1/0")
    try:
        assert "s3cret" not in json.dumps(adapter.report_status(), default=str)
    finally:
        adapter.close()


def test_cluster_spec_builds_even_when_no_node_answers() -> None:
    adapter = _build(cluster_nodes=["127.0.0.1:1", {"host": "127.0.0.1", "port": 2}])
    try:
        assert adapter.settings.cluster_nodes == (ClusterEndpoint("127.0.0.1", 1),
                                                  ClusterEndpoint("127.0.0.1", 2))
        assert adapter.report_status()["mode"] == "cluster"
    finally:
        adapter.close()


@pytest.mark.parametrize(("fields", "message"), [
    ({}, "exactly one of 'url'"),
    ({"url": "redis://127.0.0.1:1", "cluster_nodes": ["127.0.0.1:2"]}, "exactly one of 'url'"),
    ({"url": "http://127.0.0.1:1"}, "redis url must start with"),
    ({"url": "redis://127.0.0.1:1", "socket_timeout": 0}, "socket_timeout"),
    ({"url": "redis://127.0.0.1:1", "connect_timeout": -1}, "connect_timeout"),
    ({"url": "redis://127.0.0.1:1", "io_workers": 0}, "io_workers"),
    ({"url": "redis://127.0.0.1:1", "retries": -1}, "retries"),
    ({"url": "redis://127.0.0.1:1", "ttl_seconds": -1}, "ttl_seconds"),
    ({"url": "redis://127.0.0.1:1", "batch_keys": 0}, "batch_keys"),
    ({"url": "redis://127.0.0.1:1", "namespace": 3}, "namespace"),
    ({"url": "redis://127.0.0.1:1", "urll": "x"}, "Did you mean 'url'"),
    ({"cluster_nodes": []}, "exactly one of 'url'"),
    ({"cluster_nodes": ["127.0.0.1"]}, "expected 'host:port'"),
    ({"cluster_nodes": ["127.0.0.1:0"]}, "port must be in 1..65535"),
    ({"cluster_nodes": ["127.0.0.1:http"]}, "port must be an integer"),
    ({"cluster_nodes": [{"host": "h"}]}, "port must be an integer"),
    ({"cluster_nodes": [{"host": "h", "port": 1, "db": 0}]}, "unknown field"),
    ({"cluster_nodes": [7000]}, "expected 'host:port'"),
    ({"cluster_nodes": 7000}, "non-empty list"),
])
def test_bad_specs_are_clear_value_errors(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _build(**fields)


def test_cluster_nodes_accept_a_comma_separated_string_and_ipv6() -> None:
    assert parse_cluster_nodes("10.0.0.1:7000, [::1]:7001") == (
        ClusterEndpoint("10.0.0.1", 7000), ClusterEndpoint("::1", 7001))


def test_upper_bound_serdes_are_accepted_because_sizes_are_reported() -> None:
    pytest.importorskip("lmserde_asym_k16_v8")
    from lmserde.l1 import L1Manager

    adapter = create_l2_adapter({"type": "redis", "url": "redis://127.0.0.1:1/0",
                                 "serde": {"type": "asym_k16_v8"}}, L1Manager(1 << 20))
    try:
        assert adapter.report_status()["serde_wrapped"] is True
    finally:
        adapter.close()
