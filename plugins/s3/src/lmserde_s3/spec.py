"""The ``s3`` adapter type as published under the ``lmcache.l2_adapter`` entry-point group.

``{"type": "s3", "bucket": "kv-cache", "endpoint_url": "http://minio:9000"}``; credentials come
from the standard AWS provider chain, never from the spec.
"""

from __future__ import annotations

from typing import Any

from lmserde import SerdeOption
from lmserde.l2 import DEFAULT_TASK_DEADLINE_S, L2AdapterSpec, check_task_deadline

from lmserde_s3.adapter import S3L2Adapter
from lmserde_s3.settings import (
    S3Settings,
    bounded_number,
    check_bucket_name,
    check_endpoint_url,
    normalize_prefix,
    parse_tenant_routes,
)

__all__ = ["S3_ADAPTER_SPEC", "create_s3_adapter", "settings_from_options"]

#: Upper bounds of the numeric options (anything larger is a configuration mistake).
MAX_IN_FLIGHT = 1024
MAX_TIMEOUT_S = 3600.0
MAX_ATTEMPTS = 20


def _check_prefix(value: str) -> None:
    normalize_prefix(value)


def _check_region(value: str) -> None:
    if value and not all(c.isalnum() or c == "-" for c in value):
        raise ValueError(f"option 'region' must look like 'us-east-1', got {value!r}")


def _check_routes(value: Any) -> None:
    from lmserde_s3.settings import S3Location

    parse_tenant_routes(value, S3Location("placeholder-bucket", ""))


def settings_from_options(options: dict[str, Any]) -> S3Settings:
    """:class:`S3Settings` from validated options."""
    prefix = normalize_prefix(options["prefix"])
    from lmserde_s3.settings import S3Location

    default = S3Location(options["bucket"], prefix)
    return S3Settings(
        bucket=options["bucket"], prefix=prefix, endpoint_url=options["endpoint_url"],
        region=options["region"], profile=options["profile"],
        addressing_style=options["addressing_style"], verify_tls=options["verify_tls"],
        max_in_flight=options["max_in_flight"], connect_timeout=options["connect_timeout"],
        read_timeout=options["read_timeout"], max_attempts=options["max_attempts"],
        retry_mode=options["retry_mode"], conditional_writes=options["conditional_writes"],
        task_deadline_s=options["task_deadline_s"],
        tenant_routes=parse_tenant_routes(options["tenant_routes"], default),
    )


def create_s3_adapter(options: dict[str, Any], l1_manager: Any = None) -> S3L2Adapter:
    """Build the adapter from validated options (see :data:`S3_ADAPTER_SPEC`)."""
    return S3L2Adapter(settings_from_options(options))


S3_ADAPTER_SPEC = L2AdapterSpec(
    factory=create_s3_adapter,
    description="S3-compatible object store (AWS, MinIO, Ceph RGW, GCS interop): one object per "
                "key, conditional writes, exact-length loads",
    options=(
        SerdeOption("bucket", str, None, "bucket objects are stored in; it must exist",
                    required=True, check=check_bucket_name),
        SerdeOption("prefix", str, "lmserde/", "prefix of every object name ('' for none; a "
                    "'/' is appended); deployments sharing a bucket use different prefixes",
                    check=_check_prefix),
        SerdeOption("endpoint_url", str, "", "http(s)://host[:port] of an S3-compatible "
                    "service ('': AWS S3)", check=check_endpoint_url),
        SerdeOption("region", str, "", "signing region ('': from the provider chain, else "
                    "us-east-1)", check=_check_region),
        SerdeOption("profile", str, "", "named profile of the shared AWS config/credentials "
                    "files ('': the default provider chain)"),
        SerdeOption("addressing_style", str, "auto", "bucket addressing in URLs",
                    choices=("auto", "path", "virtual")),
        SerdeOption("verify_tls", bool, True, "verify the endpoint's TLS certificate"),
        SerdeOption("max_in_flight", int, 16, "requests in flight at once (I/O threads and "
                    "pooled connections)", minimum=1,
                    check=bounded_number("max_in_flight", 1, MAX_IN_FLIGHT, low_inclusive=True)),
        SerdeOption("connect_timeout", float, 5.0, "seconds to wait for a connection",
                    check=bounded_number("connect_timeout", 0, MAX_TIMEOUT_S)),
        SerdeOption("read_timeout", float, 30.0, "seconds to wait for data on a connection",
                    check=bounded_number("read_timeout", 0, MAX_TIMEOUT_S)),
        SerdeOption("max_attempts", int, 3, "attempts per request, retries included (5xx, "
                    "throttling and connection errors are retried with backoff)",
                    check=bounded_number("max_attempts", 1, MAX_ATTEMPTS, low_inclusive=True)),
        SerdeOption("retry_mode", str, "standard", "botocore retry mode ('adaptive' also "
                    "rate-limits the client when throttled)", choices=("standard", "adaptive")),
        SerdeOption("conditional_writes", bool, True, "skip existing keys with If-None-Match: * "
                    "(atomic, also across processes); false: HeadObject before PutObject for "
                    "services without conditional writes"),
        SerdeOption("task_deadline_s", float, DEFAULT_TASK_DEADLINE_S, "seconds after its "
                    "submission by which every task completes (as failed if its requests are "
                    "not done: connects, retries, backoff and slow bodies included); also bounds "
                    "get_object_sizes, delete and close", check=check_task_deadline),
        SerdeOption("tenant_routes", object, None, "per-tenant locations: {cache_salt: "
                    "{\"bucket\": ..., \"prefix\": ...}}; other tenants use bucket/prefix",
                    check=_check_routes),
    ),
    reports_object_sizes=True,
)
