"""A throwaway S3-compatible server on loopback for tests and benchmarks: moto in a child process.

:class:`LocalS3Server` is :class:`lmserde.testing.LocalMotoServer` (moto's ``ThreadedMotoServer``
in a separate Python process on ``127.0.0.1:port``: its own GIL, killable like a crashed service,
restartable on the same port with its data gone) plus bucket creation. moto is a test dependency
(``pip install "moto[server]"``), not one of the adapter's.
"""

from __future__ import annotations

import urllib.error
import urllib.request

from lmserde.testing import (
    LOOPBACK_HOST,
    TEST_CREDENTIALS,
    LocalMotoServer,
    MotoNotInstalledError,
    free_loopback_port,
)

__all__ = ["LocalS3Server", "MotoNotInstalledError", "free_loopback_port", "TEST_CREDENTIALS"]

HOST = LOOPBACK_HOST


class LocalS3Server(LocalMotoServer):
    """moto's S3 on ``127.0.0.1:port`` in a child process; a context manager."""

    def start(self) -> LocalS3Server:
        """Start (or restart) the server on its port and wait until it answers HTTP."""
        super().start()
        return self

    def __enter__(self) -> LocalS3Server:
        return self.start()

    def create_bucket(self, name: str) -> None:
        """Create a bucket (path-style ``PUT /name``); an existing one is fine."""
        request = urllib.request.Request(f"{self.endpoint_url}/{name}", method="PUT", data=b"")
        try:
            with urllib.request.urlopen(request, timeout=10):
                pass
        except urllib.error.HTTPError as exc:
            if exc.code != 409:
                raise
