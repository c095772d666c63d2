"""The boto3 S3 client the adapter uses, built from :class:`~lmserde_s3.settings.S3Settings`.

Why boto3 (see docs/plugins/s3.md for the measurement): against the same server it moved 32 MiB
objects about as fast as the alternatives with several in flight (the server was the limit), and it
fits the adapter best: botocore's standard credential chain (environment, shared files and
profiles, SSO, web identity, ECS/EC2 roles), conditional writes (``IfNoneMatch="*"``), user
metadata, retry modes that back off on throttling (``SlowDown``, 503) and 5xx, connect/read
timeouts, and a thread-safe client whose calls release the GIL while waiting on sockets, so the
adapter's I/O threads (joined by ``close()``) are all the concurrency it needs, with no event loop
or foreign runtime threads left behind.
"""

from __future__ import annotations

import logging
from typing import Any

from lmserde_s3.settings import S3Settings

__all__ = ["build_client", "error_code", "is_not_found", "is_precondition_failed"]

_log = logging.getLogger("lmserde_s3")

_FALLBACK_REGION = "us-east-1"


def build_client(settings: S3Settings) -> tuple[Any, Any]:
    """``(session, client)``; never touches the network (credentials resolve on first use).

    ``ValueError`` for an unknown ``profile``.
    """
    import boto3
    import botocore.exceptions
    from botocore.config import Config

    try:
        session = boto3.session.Session(profile_name=settings.profile or None)
    except botocore.exceptions.ProfileNotFound as exc:
        raise ValueError(f"s3 adapter option 'profile': {exc}") from None
    region = settings.region or session.region_name or _FALLBACK_REGION
    config = Config(
        region_name=region,
        connect_timeout=settings.connect_timeout,
        read_timeout=settings.read_timeout,
        retries={"total_max_attempts": settings.max_attempts, "mode": settings.retry_mode},
        max_pool_connections=settings.max_in_flight,
        s3={"addressing_style": settings.addressing_style},
        user_agent_appid="lmserde-s3",
    )
    client = session.client("s3", endpoint_url=settings.endpoint_url or None,
                            verify=settings.verify_tls, config=config)
    return session, client


def error_code(exc: BaseException) -> tuple[str, int]:
    """``(S3 error code, HTTP status)`` of a botocore ``ClientError``; ``("", 0)`` otherwise."""
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return "", 0
    code = str(response.get("Error", {}).get("Code", ""))
    status = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    return code, status


def is_not_found(exc: BaseException) -> bool:
    """The object does not exist (a missing bucket is an error, not a miss; ``HeadObject`` has
    no body and cannot tell them apart)."""
    code, status = error_code(exc)
    return code != "NoSuchBucket" and (status == 404 or code in ("404", "NoSuchKey", "NotFound"))


def is_precondition_failed(exc: BaseException) -> bool:
    """The object already exists (``If-None-Match: *`` refused it, or a concurrent conditional
    write of the same name is in progress: 409 ``ConditionalRequestConflict``)."""
    code, status = error_code(exc)
    return status == 412 or code in ("PreconditionFailed", "ConditionalRequestConflict")
