"""Where the adapter connects and how long it may wait: one server (URL) or a Redis Cluster.

Every operation is bounded: ``connect_timeout`` per connection attempt, ``socket_timeout`` per
reply, and ``retries`` immediate re-attempts after a connection error (which is also how a dropped
connection is re-established after a server restart). No backoff sleeps: a cache tier fails fast
and lets the caller treat the data as a miss.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import redis
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.retry import Retry

from lmserde_redis.abortable import abortable_class

__all__ = ["ClusterEndpoint", "RedisConnectionSettings", "parse_cluster_nodes", "RedisClientHolder"]

_URL_SCHEMES = ("redis", "rediss", "unix")


@dataclass(frozen=True)
class ClusterEndpoint:
    """One Redis Cluster node given at startup (the rest of the topology is discovered)."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def _parse_port(value: Any, where: str) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{where}: port must be an integer, got {value!r}")
    try:
        port = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: port must be an integer, got {value!r}") from None
    if not 1 <= port <= 65535 or (isinstance(value, float) and not value.is_integer()):
        raise ValueError(f"{where}: port must be in 1..65535, got {value!r}")
    return port


def _parse_node(item: Any, index: int) -> ClusterEndpoint:
    where = f"cluster_nodes[{index}]"
    if isinstance(item, str):
        host, sep, port = item.strip().rpartition(":")
        if not sep or not host:
            raise ValueError(f"{where}: expected 'host:port', got {item!r}")
        host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
        return ClusterEndpoint(host, _parse_port(port, where))
    if isinstance(item, dict):
        unknown = sorted(set(item) - {"host", "port"})
        if unknown:
            raise ValueError(f"{where}: unknown field(s) {unknown}; expected 'host' and 'port'")
        host = item.get("host")
        if not isinstance(host, str) or not host:
            raise ValueError(f"{where}: 'host' must be a non-empty string, got {host!r}")
        return ClusterEndpoint(host, _parse_port(item.get("port"), where))
    raise ValueError(
        f"{where}: expected 'host:port' or {{'host': ..., 'port': ...}}, got {type(item).__name__}"
    )


def parse_cluster_nodes(value: Any) -> tuple[ClusterEndpoint, ...]:
    """Startup nodes from a list of ``"host:port"`` strings or ``{"host", "port"}`` dicts.

    A single comma-separated string is accepted too (environment variables).
    """
    if isinstance(value, str):
        value = [part for part in value.split(",") if part.strip()]
    if not isinstance(value, Sequence) or isinstance(value, (bytes, bytearray)) or not value:
        raise ValueError(
            "cluster_nodes must be a non-empty list of 'host:port' strings or "
            f"{{'host': ..., 'port': ...}} dicts, got {value!r}"
        )
    return tuple(_parse_node(item, i) for i, item in enumerate(value))


@dataclass(frozen=True)
class RedisConnectionSettings:
    """A standalone server (``url``) or a cluster (``cluster_nodes``), plus timeouts and credentials.

    Exactly one of ``url`` and ``cluster_nodes`` is given. Credentials in the URL win over
    ``username``/``password`` (which apply to cluster nodes and to URLs without credentials).
    """

    url: str | None = None
    cluster_nodes: tuple[ClusterEndpoint, ...] = ()
    username: str | None = None
    password: str | None = None
    socket_timeout: float = 5.0
    connect_timeout: float = 2.0
    retries: int = 1

    def __post_init__(self) -> None:
        if (self.url is None) == (not self.cluster_nodes):
            raise ValueError(
                "redis adapter needs exactly one of 'url' (a single server, e.g. "
                "'redis://127.0.0.1:6379/0') and 'cluster_nodes' (Redis Cluster startup nodes)"
            )
        if self.url is not None:
            scheme = urlsplit(self.url).scheme
            if scheme not in _URL_SCHEMES:
                raise ValueError(
                    f"redis url must start with one of {', '.join(s + '://' for s in _URL_SCHEMES)}"
                    f"; got {self.url!r}"
                )
        for name in ("socket_timeout", "connect_timeout"):
            value = getattr(self, name)
            if not value > 0:
                raise ValueError(f"redis adapter option '{name}' must be > 0 seconds, got {value!r}")
        if self.retries < 0:
            raise ValueError(f"redis adapter option 'retries' must be >= 0, got {self.retries}")

    @property
    def is_cluster(self) -> bool:
        return bool(self.cluster_nodes)

    def describe(self) -> str:
        """Where this connects, without credentials."""
        if self.url is not None:
            parts = urlsplit(self.url)
            host = parts.hostname or ""
            netloc = f"{host}:{parts.port}" if parts.port else host
            return f"{parts.scheme}://{netloc}{parts.path}"
        return "cluster " + ",".join(str(n) for n in self.cluster_nodes)

    def _common_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "socket_timeout": self.socket_timeout,
            "socket_connect_timeout": self.connect_timeout,
            "retry": Retry(NoBackoff(), self.retries),
        }
        if self.username:
            kwargs["username"] = self.username
        if self.password:
            kwargs["password"] = self.password
        return kwargs

    def build_standalone(self) -> redis.Redis:
        """A client for ``url``; connects lazily, so this never touches the network. Its
        connections are abortable (see :mod:`lmserde_redis.abortable`)."""
        assert self.url is not None
        kwargs = self._common_kwargs()
        parts = urlsplit(self.url)
        if parts.username or parts.password:
            kwargs.pop("username", None)
            kwargs.pop("password", None)
        try:
            pool = redis.ConnectionPool.from_url(self.url, **kwargs)
        except ValueError as exc:
            raise ValueError(f"invalid redis url {self.url!r}: {exc}") from None
        pool.connection_class = abortable_class(pool.connection_class)
        return redis.Redis.from_pool(pool)

    def build_cluster(self) -> RedisCluster:
        """A cluster client; it connects to discover the topology, so this can raise. Its
        connections are redis-py's own (redis-py's cluster client takes no connection class):
        a task's deadline still completes the task, but cannot abort its round trip."""
        return RedisCluster(
            startup_nodes=[ClusterNode(n.host, n.port) for n in self.cluster_nodes],
            require_full_coverage=False,
            **self._common_kwargs(),
        )


class RedisClientHolder:
    """Owns the client: built at once for a URL, on first use (and after a failure) for a cluster.

    A cluster whose nodes are all down at startup therefore does not fail construction: tasks
    fail until one node answers, then the client is built.
    """

    def __init__(self, settings: RedisConnectionSettings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._client: redis.Redis | RedisCluster | None = None
        self._closed = False
        if not settings.is_cluster:
            self._client = settings.build_standalone()

    def get(self) -> redis.Redis | RedisCluster:
        """The client; raises ``redis.RedisError`` when a cluster cannot be reached yet."""
        client = self._client
        if client is not None:
            return client
        with self._lock:
            if self._closed:
                raise redis.ConnectionError("redis adapter is closed")
            if self._client is None:
                self._client = self.settings.build_cluster()
            return self._client

    def close(self) -> None:
        with self._lock:
            self._closed = True
            client, self._client = self._client, None
        if client is not None:
            client.close()
