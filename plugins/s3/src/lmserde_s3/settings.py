"""Where the adapter stores (bucket, prefix, endpoint, per-tenant routes) and how its client behaves.

Credentials are never options: the client takes them from botocore's standard provider chain
(``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_SESSION_TOKEN``, the shared credentials and
config files with an optional ``profile``, web identity, ECS and EC2 instance roles). Nothing here
holds a secret, so these settings may be logged and shown in status.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from lmserde.l2 import DEFAULT_TASK_DEADLINE_S, check_task_deadline

__all__ = ["S3Location", "S3Settings", "parse_tenant_routes", "check_bucket_name",
           "normalize_prefix", "check_endpoint_url", "bounded_number"]

_BUCKET = re.compile(r"[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]\Z")
_IPV4 = re.compile(r"\d+\.\d+\.\d+\.\d+\Z")


def check_bucket_name(name: str, where: str = "bucket") -> None:
    """S3's bucket naming rules (3-63 characters of ``a-z 0-9 . -``, no ``..``, not an IP)."""
    if not isinstance(name, str) or not _BUCKET.match(name) or ".." in name or _IPV4.match(name):
        raise ValueError(
            f"{where} {name!r} is not a valid bucket name (3-63 characters of lowercase letters, "
            "digits, '.' and '-', starting and ending with a letter or digit)"
        )


def normalize_prefix(prefix: str, where: str = "prefix") -> str:
    """``""`` or a prefix ending in ``/`` (one is appended); no leading ``/``, no ``.``/``..``
    segments, no control characters."""
    if not isinstance(prefix, str):
        raise ValueError(f"{where} must be a string, got {type(prefix).__name__}")
    if not prefix:
        return ""
    if prefix.startswith("/"):
        raise ValueError(f"{where} {prefix!r} must not start with '/'")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in prefix):
        raise ValueError(f"{where} {prefix!r} contains control characters")
    normalized = prefix if prefix.endswith("/") else prefix + "/"
    if any(seg in ("", ".", "..") for seg in normalized[:-1].split("/")):
        raise ValueError(f"{where} {prefix!r} has an empty, '.' or '..' path segment")
    if len(normalized.encode("utf-8")) > 512:
        raise ValueError(f"{where} is longer than 512 bytes")
    return normalized


def check_endpoint_url(url: str) -> None:
    """``""`` (the service's default endpoint) or an ``http(s)://host[:port]`` URL without
    credentials."""
    if url == "":
        return
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"endpoint_url must be an http:// or https:// URL, got {url!r}")
    if parts.username or parts.password:
        raise ValueError("endpoint_url must not contain credentials (they come from the "
                         "standard AWS provider chain)")
    try:
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError:
        raise ValueError(f"endpoint_url has an invalid port: {url!r}") from None


def bounded_number(name: str, low: float, high: float, *, low_inclusive: bool = False) -> Any:
    """A ``SerdeOption.check`` accepting finite numbers in ``(low, high]`` (``[low, high]``)."""
    def check(value: float) -> None:
        ok_low = value >= low if low_inclusive else value > low
        if not math.isfinite(value) or not ok_low or value > high:
            bracket = "[" if low_inclusive else "("
            raise ValueError(f"option '{name}' must be a finite number in {bracket}{low:g}, "
                             f"{high:g}], got {value!r}")
    return check


@dataclass(frozen=True)
class S3Location:
    """A bucket and a prefix (``""`` or ending in ``/``) objects are stored under."""

    bucket: str
    prefix: str = ""

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


def parse_tenant_routes(value: Any, default: S3Location) -> dict[str, S3Location]:
    """``{cache_salt: {"bucket": ..., "prefix": ...}}`` (each field optional, defaulting to the
    adapter's) as validated locations. Salts must be non-empty. Tenants may share a location
    (names carry the tenant hash, so they never collide)."""
    if value in (None, {}):
        return {}
    if not isinstance(value, Mapping):
        raise ValueError("tenant_routes must be an object mapping cache_salt to "
                         f'{{"bucket": ..., "prefix": ...}}, got {type(value).__name__}')
    routes: dict[str, S3Location] = {}
    for salt, route in value.items():
        where = f"tenant_routes[{salt!r}]"
        if not isinstance(salt, str) or not salt:
            raise ValueError(f"{where}: the cache_salt must be a non-empty string")
        if not isinstance(route, Mapping):
            raise ValueError(f"{where}: expected an object with 'bucket' and/or 'prefix'")
        unknown = sorted(set(route) - {"bucket", "prefix"})
        if unknown:
            raise ValueError(f"{where}: unknown field(s) {unknown}; expected 'bucket', 'prefix'")
        if not route:
            raise ValueError(f"{where}: give a 'bucket' and/or a 'prefix'")
        bucket = route.get("bucket", default.bucket)
        check_bucket_name(bucket, f"{where}.bucket")
        prefix = normalize_prefix(route.get("prefix", default.prefix), f"{where}.prefix")
        routes[salt] = S3Location(bucket, prefix)
    return routes


@dataclass(frozen=True)
class S3Settings:
    """Validated adapter settings (see the option list in :mod:`lmserde_s3.spec`)."""

    bucket: str
    prefix: str = "lmserde/"
    endpoint_url: str = ""
    region: str = ""
    profile: str = ""
    addressing_style: str = "auto"
    verify_tls: bool = True
    max_in_flight: int = 16
    connect_timeout: float = 5.0
    read_timeout: float = 30.0
    max_attempts: int = 3
    retry_mode: str = "standard"
    conditional_writes: bool = True
    task_deadline_s: float = DEFAULT_TASK_DEADLINE_S
    tenant_routes: Mapping[str, S3Location] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_bucket_name(self.bucket)
        if self.prefix != normalize_prefix(self.prefix):
            raise ValueError(f"prefix {self.prefix!r} must be normalized (empty or ending in '/')")
        check_endpoint_url(self.endpoint_url)
        if self.max_in_flight < 1 or self.max_attempts < 1:
            raise ValueError("max_in_flight and max_attempts must be >= 1")
        check_task_deadline(self.task_deadline_s)

    @property
    def default_location(self) -> S3Location:
        return S3Location(self.bucket, self.prefix)

    def location_for(self, cache_salt: str) -> S3Location:
        """Where objects of tenant ``cache_salt`` go."""
        return self.tenant_routes.get(cache_salt, self.default_location) if cache_salt else \
            self.default_location

    def locations(self) -> list[S3Location]:
        """The default location and every routed one, each once (for listing)."""
        return list(dict.fromkeys([self.default_location, *self.tenant_routes.values()]))

    def describe(self) -> dict[str, Any]:
        """Non-secret settings for status (tenant salts are shown as their tags only)."""
        from lmserde_s3.object_names import salt_tag

        return {"bucket": self.bucket, "prefix": self.prefix,
                "endpoint_url": self.endpoint_url or "(service default)",
                "region": self.region or "(provider chain)", "profile": self.profile or None,
                "max_in_flight": self.max_in_flight, "connect_timeout": self.connect_timeout,
                "read_timeout": self.read_timeout, "max_attempts": self.max_attempts,
                "retry_mode": self.retry_mode, "conditional_writes": self.conditional_writes,
                "task_deadline_s": self.task_deadline_s,
                "tenant_routes": {salt_tag(s): str(loc) for s, loc in self.tenant_routes.items()}}
