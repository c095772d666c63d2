"""A throwaway AWS-compatible server on loopback for tests and benchmarks: moto in a child process.

:class:`LocalMotoServer` runs moto's ``ThreadedMotoServer`` (every service moto emulates: S3, KMS,
...) in a separate Python process on ``127.0.0.1:port``, so the server has its own GIL (the
process under test is measured, not moto), can be killed like a crashed service (:meth:`kill`),
frozen (``frozen_process(server.pid)``) and restarted on the same port (:meth:`start`; its
in-memory data is gone, like a fresh deployment). moto is a test dependency
(``pip install "moto[server]"``), never one of a plugin's.
"""

from __future__ import annotations

import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from lmserde.testing.loopback_server import (
    LOOPBACK_HOST,
    LoopbackChildServer,
    free_loopback_port,
    kill_child,
    start_child,
    stop_child,
    wait_until,
)

__all__ = ["LocalMotoServer", "MotoNotInstalledError", "TEST_CREDENTIALS",
           "use_test_aws_environment"]

#: Credentials a local moto server accepts (it does not check them); exported as environment
#: variables to the clients that talk to it.
TEST_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "lmserde-test", "AWS_SECRET_ACCESS_KEY": "lmserde-test",
                    "AWS_DEFAULT_REGION": "us-east-1"}

#: Variables that would point a client at a real account or endpoint.
_AWS_VARIABLES = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL",
                  "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL_KMS", "AWS_REGION", "AWS_CA_BUNDLE")


def use_test_aws_environment(monkeypatch: Any, empty_dir: Path) -> None:
    """Give boto3 clients :data:`TEST_CREDENTIALS` through the environment (``monkeypatch``: a
    pytest ``MonkeyPatch``), with no profile, no endpoint override, config files under the
    nonexistent ``empty_dir`` and instance metadata off: the developer's own AWS setup is never
    read."""
    for name in _AWS_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in TEST_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(empty_dir / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(empty_dir / "credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


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
            f"the local AWS-compatible server needs moto with its server extra ({exc}); "
            'install it with: pip install "moto[server]"'
        ) from None


class LocalMotoServer(LoopbackChildServer):
    """moto on ``127.0.0.1:port`` in a child process; a context manager."""

    def __init__(self, *, port: int | None = None, startup_timeout: float = 60.0) -> None:
        _require_moto()
        self.port = port or free_loopback_port()
        self.startup_timeout = startup_timeout
        self._process: subprocess.Popen[str] | None = None

    @property
    def endpoint_url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://{LOOPBACK_HOST}:{self.port}"

    def start(self) -> LocalMotoServer:
        """Start (or restart) the server on its port and wait until it answers HTTP."""
        if self.running:
            return self
        self._process = start_child([sys.executable, "-c", _CHILD, LOOPBACK_HOST, str(self.port)],
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
        """Stop the server (:meth:`stop`); idempotent."""
        self.stop()
