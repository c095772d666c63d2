"""A throwaway S3-compatible server on loopback for tests and benchmarks: moto in a child process.

:class:`LocalS3Server` runs moto's ``ThreadedMotoServer`` in a separate Python process on
``127.0.0.1:port``, so the server has its own GIL (the process under test is measured, not
moto), can be killed like a crashed service (:meth:`kill`) and restarted on the same port
(:meth:`start`; its in-memory data is gone, like a fresh deployment). moto is a test dependency
(``pip install "moto[server]"``), not one of the adapter's.
"""

from __future__ import annotations

import subprocess
import sys
import urllib.error
import urllib.request

from lmserde.testing import (
    LOOPBACK_HOST,
    LoopbackChildServer,
    free_loopback_port,
    kill_child,
    start_child,
    stop_child,
    wait_until,
)

__all__ = ["LocalS3Server", "MotoNotInstalledError", "free_loopback_port", "TEST_CREDENTIALS"]

HOST = LOOPBACK_HOST

#: Credentials a local moto server accepts (it does not check them); exported as environment
#: variables to the clients that talk to it.
TEST_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "lmserde-test", "AWS_SECRET_ACCESS_KEY": "lmserde-test",
                    "AWS_DEFAULT_REGION": "us-east-1"}

_CHILD = """
import sys, threading
from moto.server import ThreadedMotoServer
server = ThreadedMotoServer(ip_address=sys.argv[1], port=int(sys.argv[2]), verbose=False)
server.start()
print("ready", flush=True)
sys.stdin.read()  # until the parent closes stdin or dies
server.stop()
"""


class MotoNotInstalledError(RuntimeError):
    """moto (with its server extra) is not importable."""


def _require_moto() -> None:
    try:
        import moto.server  # noqa: F401
    except ImportError as exc:
        raise MotoNotInstalledError(
            f"the local S3 server needs moto with its server extra ({exc}); "
            'install it with: pip install "moto[server]"'
        ) from None


class LocalS3Server(LoopbackChildServer):
    """moto's S3 on ``127.0.0.1:port`` in a child process; a context manager."""

    def __init__(self, *, port: int | None = None, startup_timeout: float = 60.0) -> None:
        _require_moto()
        self.port = port or free_loopback_port()
        self.startup_timeout = startup_timeout
        self._process: subprocess.Popen[str] | None = None

    @property
    def endpoint_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self) -> LocalS3Server:
        """Start (or restart) the server on its port and wait until it answers HTTP."""
        if self.running:
            return self
        self._process = start_child([sys.executable, "-c", _CHILD, HOST, str(self.port)],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        def ready() -> bool:
            process = self._process
            if process is None or process.poll() is not None:
                code = None if process is None else process.returncode
                raise RuntimeError(f"moto server on port {self.port} exited with {code}")
            try:
                with urllib.request.urlopen(self.endpoint_url + "/", timeout=2):
                    return True
            except urllib.error.HTTPError:
                return True  # any HTTP answer means it is serving

        wait_until(ready, f"moto server on port {self.port} answering HTTP",
                   self.startup_timeout)

    def create_bucket(self, name: str) -> None:
        """Create a bucket (path-style ``PUT /name``); an existing one is fine."""
        request = urllib.request.Request(f"{self.endpoint_url}/{name}", method="PUT", data=b"")
        try:
            with urllib.request.urlopen(request, timeout=10):
                pass
        except urllib.error.HTTPError as exc:
            if exc.code != 409:
                raise

    def kill(self) -> None:
        """SIGKILL the server (a crash: open connections drop at once) and reap it."""
        if self._process is not None:
            kill_child(self._process, group=True)
        self._close_pipes()

    def stop(self) -> None:
        """Stop the server (stdin closed, then SIGTERM, then SIGKILL); idempotent."""
        process = self._process
        if process is None:
            return
        stdin = process.stdin
        stop_child(process, ask=stdin.close if stdin is not None else None)
        self._close_pipes()

    def _close_pipes(self) -> None:
        process = self._process
        if process is None:
            return
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass

    def close(self) -> None:
        """The same as :meth:`stop` (moto keeps its data in memory: nothing else to release)."""
        self.stop()
