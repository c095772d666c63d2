"""Fixtures of the redis adapter tests: real ``redis-server`` processes on loopback ports.

A missing ``redis-server`` fails these tests (it never skips them): CI installs the Debian
``redis-server`` package, and a developer sees how to install it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from lmserde.l2 import create_l2_adapter
from lmserde_redis.local_server import (
    LocalRedisCluster,
    LocalRedisServer,
    RedisServerNotFoundError,
    find_redis_binary,
)

_namespaces = itertools.count()


def _require_binaries() -> None:
    try:
        find_redis_binary("redis-server")
        find_redis_binary("redis-cli")
    except RedisServerNotFoundError as exc:
        pytest.fail(f"the redis adapter tests need real Redis servers: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRedisServer]:
    """One server shared by the tests that do not stop it (each test uses its own namespace)."""
    _require_binaries()
    server = LocalRedisServer(tmp_path_factory.mktemp("redis-shared"))
    server.start()
    yield server
    server.close()


@pytest.fixture
def own_redis_server(tmp_path: Path) -> Iterator[LocalRedisServer]:
    """A server this test may kill, pause or restart."""
    _require_binaries()
    server = LocalRedisServer(tmp_path / "redis")
    server.start()
    yield server
    server.close()


@pytest.fixture(scope="module")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRedisCluster]:
    """3 masters with one replica each (failover-capable), created by ``redis-cli --cluster``."""
    _require_binaries()
    cluster = LocalRedisCluster(tmp_path_factory.mktemp("redis-cluster"), masters=3, replicas=1,
                                node_timeout_ms=1000)
    with cluster:
        yield cluster


@pytest.fixture
def namespace() -> str:
    """A namespace no other test uses, so tests sharing a server never see each other's keys."""
    return f"test{next(_namespaces)}"


@pytest.fixture
def make_redis_adapter(namespace: str) -> Iterator[Callable[..., Any]]:
    """``make(spec_fields..., l1=None)``: a ``redis`` adapter (closed after the test)."""
    adapters: list[Any] = []

    def make(l1: Any = None, **fields: Any) -> Any:
        spec = {"type": "redis", "namespace": namespace, **fields}
        adapter = create_l2_adapter(spec, l1)
        adapters.append(adapter)
        return adapter

    yield make
    for adapter in adapters:
        adapter.close()
