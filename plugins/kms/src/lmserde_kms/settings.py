"""The options of the ``aws-kms`` key provider (its ``key_provider_options``), parsed once."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lmserde.tenant_keys import DEFAULT_RELOAD_INTERVAL_S

__all__ = ["KmsSettings", "parse_settings"]


@dataclass(frozen=True)
class KmsSettings:
    """Where the customer master key is, where the wrapped data keys are, and every deadline.

    ``key_id``: the customer master key (key id, ARN, alias name ``alias/...`` or alias ARN)
    that wraps the data keys. ``wrapped_keyring_path``: the wrapped keyring file (see
    ``docs/plugins/kms.md``). ``endpoint_url``/``region``/``profile``: any AWS-KMS-compatible
    service (empty: boto3's defaults). A request to KMS has ``connect_timeout_s`` to connect and
    ``read_timeout_s`` per read, at most ``max_attempts`` attempts, and ``request_deadline_s``
    in all, after which the caller is answered with an error whatever the request does.
    Unwrapped keys are kept in memory ``cache_ttl_s`` seconds; the wrapped keyring file is
    looked at every ``reload_interval_s`` seconds.
    """

    key_id: str
    wrapped_keyring_path: str
    endpoint_url: str = ""
    region: str = ""
    profile: str = ""
    connect_timeout_s: float = 2.0
    read_timeout_s: float = 5.0
    max_attempts: int = 3
    request_deadline_s: float = 10.0
    cache_ttl_s: float = 300.0
    reload_interval_s: float = DEFAULT_RELOAD_INTERVAL_S
    allow_insecure_key_permissions: bool = False


_REQUIRED = ("key_id", "wrapped_keyring_path")
_STRINGS = ("key_id", "wrapped_keyring_path", "endpoint_url", "region", "profile")
_POSITIVE = ("connect_timeout_s", "read_timeout_s", "request_deadline_s", "cache_ttl_s")


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"aws-kms option '{name}' must be a finite number, got {value!r}")
    return float(value)


def parse_settings(options: Mapping[str, Any]) -> KmsSettings:
    """:class:`KmsSettings` from ``key_provider_options``; ``ValueError`` naming the option for
    anything unknown, missing or out of range."""
    known = set(KmsSettings.__dataclass_fields__)
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(f"unknown aws-kms option(s) {', '.join(unknown)}; known: "
                         f"{', '.join(sorted(known))}")
    for name in _REQUIRED:
        if not options.get(name):
            raise ValueError(f"aws-kms needs the option '{name}'")
    values: dict[str, Any] = {}
    for name, value in options.items():
        if name in _STRINGS:
            if not isinstance(value, str):
                raise ValueError(f"aws-kms option '{name}' must be a string, got {value!r}")
            values[name] = value
        elif name == "allow_insecure_key_permissions":
            if not isinstance(value, bool):
                raise ValueError(f"aws-kms option '{name}' must be true or false")
            values[name] = value
        elif name == "max_attempts":
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 10:
                raise ValueError(f"aws-kms option 'max_attempts' must be an integer in [1, 10], "
                                 f"got {value!r}")
            values[name] = value
        else:
            number = _number(name, value)
            if number < 0 or (name in _POSITIVE and number == 0):
                raise ValueError(f"aws-kms option '{name}' must be "
                                 f"{'> 0' if name in _POSITIVE else '>= 0'}, got {value!r}")
            values[name] = number
    return KmsSettings(**values)
