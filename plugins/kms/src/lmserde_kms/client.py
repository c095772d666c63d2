"""The boto3 KMS client the provider and ``lmserde kms rotate`` use: every call has a deadline.

botocore bounds each attempt (``connect_timeout_s``, ``read_timeout_s`` per socket read) and the
number of attempts (``max_attempts``, standard retry mode: backs off on throttling and 5xx). A
server that trickles bytes could still stretch one attempt, so :class:`KmsCaller` also runs each
call on a small pool of its own threads and gives the caller an error after
``request_deadline_s`` whatever the call still does (it ends within botocore's bounds and its
answer is then discarded). Credentials come from boto3's standard chain (environment, shared
files, SSO, web identity, instance roles).
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from lmserde_kms.settings import KmsSettings

__all__ = ["KmsDeadlineError", "KmsCaller", "build_client"]

_FALLBACK_REGION = "us-east-1"
_WORKERS = 4
_T = TypeVar("_T")


class KmsDeadlineError(TimeoutError):
    """A KMS request did not finish within ``request_deadline_s``."""


def build_client(settings: KmsSettings) -> Any:
    """A KMS client for ``settings``; never touches the network (credentials resolve on first
    use). ``ValueError`` for an unknown ``profile``."""
    import boto3
    import botocore.exceptions
    from botocore.config import Config

    try:
        session = boto3.session.Session(profile_name=settings.profile or None)
    except botocore.exceptions.ProfileNotFound as exc:
        raise ValueError(f"aws-kms option 'profile': {exc}") from None
    config = Config(
        region_name=settings.region or session.region_name or _FALLBACK_REGION,
        connect_timeout=settings.connect_timeout_s,
        read_timeout=settings.read_timeout_s,
        retries={"total_max_attempts": settings.max_attempts, "mode": "standard"},
        user_agent_appid="lmserde-kms",
    )
    return session.client("kms", endpoint_url=settings.endpoint_url or None, config=config)


class KmsCaller:
    """Runs KMS calls on its own threads with an overall deadline; concurrent calls for the same
    ``flight`` key share one request (one ``Decrypt`` per data key however many frames wait)."""

    def __init__(self, client: Any, deadline_s: float) -> None:
        self.client = client
        self._deadline_s = deadline_s
        self._pool = concurrent.futures.ThreadPoolExecutor(_WORKERS,
                                                           thread_name_prefix="lmserde-kms")
        self._lock = threading.Lock()
        self._flights: dict[Any, concurrent.futures.Future[Any]] = {}

    def call(self, flight: Any, fn: Callable[[], _T]) -> _T:
        """``fn()``'s result, or ``KmsDeadlineError`` once ``request_deadline_s`` passed;
        whatever ``fn`` raised otherwise."""
        with self._lock:
            future = self._flights.get(flight)
            if future is None:
                future = self._pool.submit(fn)
                self._flights[flight] = future
                future.add_done_callback(lambda _f: self._land(flight, _f))
        try:
            return future.result(timeout=self._deadline_s)
        except concurrent.futures.TimeoutError:
            raise KmsDeadlineError(
                f"no answer from KMS within {self._deadline_s:g} s (request_deadline_s)"
            ) from None

    def _land(self, flight: Any, future: concurrent.futures.Future[Any]) -> None:
        with self._lock:
            if self._flights.get(flight) is future:
                del self._flights[flight]

    def close(self) -> None:
        """Stop taking calls; calls in flight end within botocore's bounds."""
        self._pool.shutdown(wait=False, cancel_futures=True)
