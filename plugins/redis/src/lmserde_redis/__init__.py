"""lmserde-redis: a Redis / Redis Cluster L2 adapter for lmserde and LMCache-style KV tiers.

Configured as ``{"type": "redis", "url": "redis://127.0.0.1:6379/0"}`` or
``{"type": "redis", "cluster_nodes": ["host:7000", ...]}``, optionally with a ``serde``.
"""

from __future__ import annotations

from lmserde_redis.adapter import RedisL2Adapter
from lmserde_redis.connection import ClusterEndpoint, RedisConnectionSettings, parse_cluster_nodes
from lmserde_redis.key_names import RedisKeyNamer
from lmserde_redis.spec import REDIS_ADAPTER_SPEC, create_redis_adapter

__all__ = [
    "REDIS_ADAPTER_SPEC",
    "ClusterEndpoint",
    "RedisConnectionSettings",
    "RedisKeyNamer",
    "RedisL2Adapter",
    "create_redis_adapter",
    "parse_cluster_nodes",
]
