"""A throwaway S3-compatible server on loopback for tests and benchmarks: moto in a child process.

:class:`LocalS3Server` runs moto's ``ThreadedMotoServer`` in a separate Python process on
``127.0.0.1:port``, so the server has its own GIL (the process under test is measured, not
moto), can be killed like a crashed service (:meth:`kill`) and restarted on the same port
(:meth:`start`; its in-memory data is gone, like a fresh deployment). moto is a test dependency
(``pip install "moto[server]"``), not one of the adapter's.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence

__all__ = ["LocalS3Server", "MotoNotInstalledError", "free_loopback_port", "TEST_CREDENTIALS"]

HOST = "127.0.0.1"

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


def free_loopback_port(exclude: Sequence[int] = ()) -> int:
    """A TCP port on 127.0.0.1 that is free right now (chosen by the kernel)."""
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((HOST, 0))
            port = int(s.getsockname()[1])
        if port not in exclude:
            return port
    raise RuntimeError("could not find a free loopback port")


def _require_moto() -> None:
    try:
        import moto.server  # noqa: F401
    except ImportError as exc:
        raise MotoNotInstalledError(
            f"the local S3 server needs moto with its server extra ({exc}); "
            'install it with: pip install "moto[server]"'
        ) from None


class LocalS3Server:
    """moto's S3 on ``127.0.0.1:port`` in a child process; a context manager."""

    def __init__(self, *, port: int | None = None, startup_timeout: float = 60.0) -> None:
        _require_moto()
        self.port = port or free_loopback_port()
        self.startup_timeout = startup_timeout
        self._process: subprocess.Popen[str] | None = None

    @property
    def endpoint_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self.running and self._process else None

    def start(self) -> LocalS3Server:
        """Start (or restart) the server on its port and wait until it answers HTTP."""
        if self.running:
            return self
        self._process = subprocess.Popen(
            [sys.executable, "-c", _CHILD, HOST, str(self.port)], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True,
        )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while True:
            process = self._process
            if process is None or process.poll() is not None:
                code = None if process is None else process.returncode
                raise RuntimeError(f"moto server on port {self.port} exited with {code}")
            try:
                with urllib.request.urlopen(self.endpoint_url + "/", timeout=2):
                    return
            except urllib.error.HTTPError:
                return  # any HTTP answer means it is serving
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"moto server on port {self.port} did not answer within "
                                   f"{self.startup_timeout:g} s")
            time.sleep(0.05)

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
        process = self._process
        if process is not None and process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
        self._close_pipes()

    def stop(self) -> None:
        """Stop the server (stdin closed, then SIGTERM, then SIGKILL); idempotent."""
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            try:
                if process.stdin is not None:
                    process.stdin.close()
                process.wait(timeout=5)
            except (subprocess.TimeoutExpired, OSError):
                process.terminate()
                try:
                    process.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(timeout=5)
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

    close = stop

    def __enter__(self) -> LocalS3Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
