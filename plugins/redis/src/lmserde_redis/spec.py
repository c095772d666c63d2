"""The ``redis`` adapter type as published under the ``lmcache.l2_adapter`` entry-point group.

``{"type": "redis", "url": "redis://127.0.0.1:6379/0"}`` for one server,
``{"type": "redis", "cluster_nodes": ["10.0.0.1:7000", "10.0.0.2:7000"]}`` for Redis Cluster.
"""

from __future__ import annotations

from typing import Any

from lmserde import SerdeOption
from lmserde.l2 import DEFAULT_TASK_DEADLINE_S, L2AdapterSpec, check_task_deadline

from lmserde_redis.adapter import RedisL2Adapter
from lmserde_redis.connection import RedisConnectionSettings, parse_cluster_nodes

__all__ = ["REDIS_ADAPTER_SPEC", "create_redis_adapter"]


#: Bounds of the numeric options (a value beyond them is a config error, not a run-time one).
MAX_TIMEOUT_SECONDS = 3600.0
MAX_RETRIES = 100
MAX_TTL_SECONDS = 10 * 365 * 86400.0
MAX_IO_WORKERS = 256
MAX_BATCH_KEYS = 1 << 20
MAX_BATCH_BYTES = 1 << 40


def _positive(name: str) -> Any:
    def check(value: float) -> None:
        if not value > 0:
            raise ValueError(f"option '{name}' must be > 0, got {value!r}")
    return check


def create_redis_adapter(options: dict[str, Any], l1_manager: Any = None) -> RedisL2Adapter:
    """Build the adapter from validated options (see :data:`REDIS_ADAPTER_SPEC`)."""
    url = options.get("url") or None
    nodes_value = options.get("cluster_nodes")
    nodes = parse_cluster_nodes(nodes_value) if nodes_value not in (None, "", []) else ()
    settings = RedisConnectionSettings(
        url=url,
        cluster_nodes=nodes,
        username=options.get("username") or None,
        password=options.get("password") or None,
        socket_timeout=float(options.get("socket_timeout", 5.0)),
        connect_timeout=float(options.get("connect_timeout", 2.0)),
        retries=int(options.get("retries", 1)),
    )
    return RedisL2Adapter(
        settings,
        namespace=options.get("namespace", "lmserde"),
        ttl_seconds=float(options.get("ttl_seconds", 0.0)),
        io_workers=int(options.get("io_workers", 4)),
        batch_keys=int(options.get("batch_keys", 64)),
        batch_bytes=int(options.get("batch_bytes", 64 << 20)),
        task_deadline_s=float(options.get("task_deadline_s", DEFAULT_TASK_DEADLINE_S)),
    )


REDIS_ADAPTER_SPEC = L2AdapterSpec(
    factory=create_redis_adapter,
    description="Redis server or Redis Cluster (pipelined SET/GET, stored sizes via STRLEN)",
    options=(
        SerdeOption("url", str, "", "server URL: redis://host:port/db, rediss://... or "
                    "unix:///path (give this or cluster_nodes)"),
        SerdeOption("cluster_nodes", object, None, "Redis Cluster startup nodes: a list of "
                    "'host:port' strings or {host, port} dicts (give this or url)"),
        SerdeOption("namespace", str, "lmserde", "prefix of every key ('<namespace>:'); "
                    "deployments sharing a server use different namespaces"),
        SerdeOption("username", str, "", "ACL user name (a URL's own credentials win)"),
        SerdeOption("password", str, "", "password (a URL's own credentials win)"),
        SerdeOption("socket_timeout", float, 5.0, "seconds to wait for one reply",
                    check=_positive("socket_timeout"), maximum=MAX_TIMEOUT_SECONDS),
        SerdeOption("connect_timeout", float, 2.0, "seconds to wait for a connection",
                    check=_positive("connect_timeout"), maximum=MAX_TIMEOUT_SECONDS),
        SerdeOption("retries", int, 1, "immediate re-attempts after a connection error "
                    "(reconnects after a server restart)", minimum=0, maximum=MAX_RETRIES),
        SerdeOption("ttl_seconds", float, 0.0, "expire stored objects after this many seconds "
                    "(0: never); lookups and touch_keys renew it", minimum=0,
                    maximum=MAX_TTL_SECONDS),
        SerdeOption("io_workers", int, 4, "threads running store/lookup/load tasks", minimum=1,
                    maximum=MAX_IO_WORKERS),
        SerdeOption("batch_keys", int, 64, "most keys per pipelined round trip", minimum=1,
                    maximum=MAX_BATCH_KEYS),
        SerdeOption("batch_bytes", int, 64 << 20, "most value bytes per pipelined round trip "
                    "(a larger single object still goes alone)", minimum=1,
                    maximum=MAX_BATCH_BYTES),
        SerdeOption("task_deadline_s", float, DEFAULT_TASK_DEADLINE_S, "seconds after its "
                    "submission by which every task completes (as failed if its work is not "
                    "done: connects, retries and slow replies included); also bounds "
                    "get_object_sizes, delete and close", check=check_task_deadline),
    ),
    reports_object_sizes=True,
)
