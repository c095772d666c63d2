"""Helpers for throwaway servers on loopback that tests and benchmarks run as child processes.

The pieces every local test server needs, whatever it serves (``redis-server``, moto's S3): a free
port on ``127.0.0.1``, a bounded wait until the server answers, a child process in its own session
(so a test can kill it like a crashed service), and a bounded stop (a polite request, SIGTERM, then
SIGKILL), and :class:`LoopbackChildServer`, the base a server class builds on (its process
state and the context-manager protocol). Each server class (``lmserde_redis.local_server``,
``lmserde_s3.local_server``) keeps its own command line, readiness probe, stop and kill.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any, TypeVar

__all__ = ["LOOPBACK_HOST", "LoopbackChildServer", "free_loopback_port", "kill_child", "log_tail",
           "start_child", "stop_child", "wait_until"]

LOOPBACK_HOST = "127.0.0.1"

_POLL_S = 0.05


def free_loopback_port(exclude: Sequence[int] = ()) -> int:
    """A TCP port on 127.0.0.1 that is free right now (chosen by the kernel), not in ``exclude``;
    ``RuntimeError`` when 100 tries found none."""
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((LOOPBACK_HOST, 0))
            port = int(s.getsockname()[1])
        if port not in exclude:
            return port
    raise RuntimeError("could not find a free loopback port")


def log_tail(path: Path, lines: int = 15) -> str:
    """The last ``lines`` lines of the log at ``path``, ``"(no log)"`` when there is none."""
    if not path.exists():
        return "(no log)"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def wait_until(condition: Callable[[], bool], what: str, timeout: float, *,
               retry_on: tuple[type[BaseException], ...] = (OSError,),
               log: Path | None = None) -> None:
    """Poll ``condition()`` until it is true; ``TimeoutError`` naming ``what`` (and the tail of
    ``log``, when given and present) once ``timeout`` seconds passed.

    An exception of a ``retry_on`` type counts as "not yet"; any other propagates at once (a
    probe raises one to say the server died and waiting is pointless).
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            if condition():
                return
        except retry_on:
            pass
        if time.monotonic() > deadline:
            tail = "\n" + log_tail(log) if log is not None and log.exists() else ""
            raise TimeoutError(f"{what} not reached within {timeout:g} s{tail}")
        time.sleep(_POLL_S)


def start_child(command: Sequence[str], *, stdin: int | IO[Any] | None = subprocess.DEVNULL,
                stdout: int | IO[Any] | None = subprocess.DEVNULL, text: bool = False
                ) -> subprocess.Popen[Any]:
    """Start ``command`` in a new session (its own process group; stderr discarded), so that
    :func:`kill_child` with ``group=True`` ends it and everything it spawned."""
    return subprocess.Popen(list(command), stdin=stdin, stdout=stdout, stderr=subprocess.DEVNULL,
                            text=text, start_new_session=True)


def kill_child(process: subprocess.Popen[Any], *, group: bool = False) -> None:
    """SIGKILL a running child (its whole process group with ``group``) and reap it; a child
    that already exited is left alone."""
    if process.poll() is not None:
        return
    if group:
        os.killpg(process.pid, signal.SIGKILL)
    else:
        process.send_signal(signal.SIGKILL)
    process.wait(timeout=10)


def stop_child(process: subprocess.Popen[Any], *, grace_s: float = 5.0,
               ask: Callable[[], None] | None = None) -> None:
    """Stop a child within about ``3 * grace_s``; idempotent.

    With ``ask`` (e.g. closing the child's stdin), that is tried first, for ``grace_s`` (an
    ``OSError`` from it skips to the next step); then SIGTERM, ``grace_s``; then SIGKILL.
    """
    if process.poll() is not None:
        return
    if ask is not None:
        try:
            ask()
            process.wait(timeout=grace_s)
            return
        except (subprocess.TimeoutExpired, OSError):
            pass
    process.terminate()
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=grace_s)


_Server = TypeVar("_Server", bound="LoopbackChildServer")


class LoopbackChildServer(ABC):
    """A server on ``127.0.0.1:port`` run as one child process (``_process``, set by
    :meth:`start`); a context manager (``with`` starts it and closes it).

    Subclasses implement :meth:`start` (start or restart the child, wait until it answers,
    return ``self``) and :meth:`close` (stop it and release what the server owns; idempotent).
    """

    port: int
    _process: subprocess.Popen[Any] | None = None

    @property
    def running(self) -> bool:
        """Whether the child process is alive."""
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        """The child's process id while it runs, else ``None``."""
        return self._process.pid if self.running and self._process else None

    @abstractmethod
    def start(self: _Server) -> _Server:
        """Start (or restart) the server and wait until it answers; ``self``."""

    @abstractmethod
    def close(self) -> None:
        """Stop the server and release what it owns; idempotent."""

    def __enter__(self: _Server) -> _Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
