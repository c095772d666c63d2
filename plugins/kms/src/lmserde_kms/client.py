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
import os
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
    ``flight`` key share one request (one ``Decrypt`` per data key however many frames wait).

    ``make_client()`` builds the boto3 client: once per process, so a forked child (whose copy
    of the parent's pool has no threads and whose client would share the parent's connections)
    gets its own pool and client on its first call.
    """

    def __init__(self, make_client: Callable[[], Any], deadline_s: float) -> None:
        self._make_client = make_client
        self._deadline_s = deadline_s
        self._lock = threading.Lock()
        self._pid = -1
        self._client: Any = None
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._flights: dict[Any, concurrent.futures.Future[Any]] = {}
        self._closed = False

    @property
    def client(self) -> Any:
        """This process's boto3 KMS client (built on first use)."""
        with self._lock:
            return self._for_this_process()[0]

    def _for_this_process(self) -> tuple[Any, concurrent.futures.ThreadPoolExecutor]:
        if self._closed:
            raise RuntimeError("aws-kms: the KMS caller is closed")
        if self._pid != os.getpid() or self._pool is None:
            self._client = self._make_client()
            self._pool = concurrent.futures.ThreadPoolExecutor(
                _WORKERS, thread_name_prefix="lmserde-kms")
            self._flights = {}
            self._pid = os.getpid()
        return self._client, self._pool

    def call(self, flight: Any, fn: Callable[[Any], _T]) -> _T:
        """``fn(client)``'s result, or ``KmsDeadlineError`` once ``request_deadline_s`` passed;
        whatever ``fn`` raised otherwise."""
        with self._lock:
            client, pool = self._for_this_process()
            future = self._flights.get(flight)
            if future is None:
                future = pool.submit(fn, client)
                self._flights[flight] = future
                future.add_done_callback(lambda done: self._land(flight, done))
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
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None and self._pid == os.getpid():
            pool.shutdown(wait=False, cancel_futures=True)
