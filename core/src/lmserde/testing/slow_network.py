"""A loopback TCP proxy that can trickle: test an adapter's deadlines against a server that is slow.

A frozen server (``SIGSTOP``) trips an adapter's read timeout; a server that sends one byte every
quarter second never does, so only an overall per-task deadline bounds a task behind it.
:class:`TrickleProxy` sits between an adapter and a real server on loopback and forwards bytes
either at full speed or ``chunk`` bytes per ``interval`` seconds, switchable at any time::

    with TrickleProxy("127.0.0.1", server_port, interval=0.25) as proxy:
        adapter = make_adapter(port=proxy.port)   # talks to the server through the proxy
        proxy.set_trickling(True)                 # now every byte crawls, in both directions
        ...
        proxy.set_trickling(False)                # the server "recovers": full speed again

``grace_bytes`` lets that many bytes of each direction of each connection through at full speed
after trickling was switched on before the trickle starts (to stall a reply in its body rather
than in its first bytes).

Bounded: at most ``max_connections`` connections at once (more are refused by closing them), at
most one buffer of ``buffer_bytes`` per direction held, and the proxy stops by itself after
``lifetime_s`` seconds even if nobody closes it. Threads only, no event loop; loopback only.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["TimedTask", "TrickleProxy", "frozen_process", "timed_task", "wait_until_idle"]

_POLL_S = 0.05


class TrickleProxy:
    """A bounded, self-stopping loopback proxy to ``host:port`` (see the module docstring)."""

    def __init__(self, host: str, port: int, *, interval: float = 0.25, chunk: int = 1,
                 trickling: bool = False, grace_bytes: int = 0, max_connections: int = 64,
                 buffer_bytes: int = 64 << 10, lifetime_s: float = 600.0) -> None:
        if (not interval > 0 or chunk < 1 or max_connections < 1 or buffer_bytes < 1
                or grace_bytes < 0):
            raise ValueError("TrickleProxy needs interval > 0, chunk, max_connections and "
                             "buffer_bytes >= 1, grace_bytes >= 0")
        self.grace_bytes = int(grace_bytes)
        self.target = (host, int(port))
        self.interval = float(interval)
        self.chunk = int(chunk)
        self.max_connections = int(max_connections)
        self.buffer_bytes = int(buffer_bytes)
        self.lifetime_s = float(lifetime_s)
        self._trickling = threading.Event()
        if trickling:
            self._trickling.set()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(_POLL_S)
        self.port: int = self._listener.getsockname()[1]
        self._started_at = time.monotonic()
        self._accepter = threading.Thread(target=self._accept, daemon=True,
                                          name="trickle-proxy-accept")
        self._accepter.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def trickling(self) -> bool:
        return self._trickling.is_set()

    def set_trickling(self, on: bool) -> None:
        """Trickle (``True``) or forward at full speed (``False``) from now on, on every
        connection (bytes held by a trickling pump are flushed at once when switched off)."""
        if on:
            self._trickling.set()
        else:
            self._trickling.clear()

    @property
    def connections(self) -> int:
        """Connections open now (each counted by its two sockets)."""
        with self._lock:
            return len(self._sockets) // 2

    def _expired(self) -> bool:
        return self._stop.is_set() or time.monotonic() - self._started_at > self.lifetime_s

    def _accept(self) -> None:
        try:
            while not self._expired():
                try:
                    client, _ = self._listener.accept()
                except TimeoutError:
                    continue
                except OSError:
                    return
                self._open(client)
        finally:
            self.close(join=False)

    def _open(self, client: socket.socket) -> None:
        with self._lock:
            full = len(self._sockets) // 2 >= self.max_connections
        if full:
            client.close()
            return
        try:
            server = socket.create_connection(self.target, timeout=5)
        except OSError:
            client.close()
            return
        for sock in (client, server):
            sock.settimeout(_POLL_S)
        with self._lock:
            self._sockets.update((client, server))
            for src, dst, name in ((client, server, "up"), (server, client, "down")):
                thread = threading.Thread(target=self._pump, args=(src, dst), daemon=True,
                                          name=f"trickle-proxy-{name}")
                self._threads.append(thread)
                thread.start()

    def _send(self, dst: socket.socket, data: bytes, graced: list[int]) -> bool:
        """Send all of ``data``, trickling while asked to; ``False`` once stopped or broken.
        ``graced[0]``: bytes of this direction sent since trickling went on."""
        view = memoryview(data)
        while view:
            if self._expired():
                return False
            if not self._trickling.is_set():
                graced[0] = 0
            elif graced[0] < self.grace_bytes:
                left = self.grace_bytes - graced[0]
                piece, view = view[:left], view[left:]
                graced[0] += len(piece)
                if not self._sendall(dst, piece):
                    return False
                continue
            if self._trickling.is_set():
                piece, view = view[:self.chunk], view[self.chunk:]
                if not self._sendall(dst, piece) or self._stop.wait(self.interval):
                    return False
            else:
                piece, view = view, view[:0]
                if not self._sendall(dst, piece):
                    return False
        return True

    def _sendall(self, dst: socket.socket, data: memoryview) -> bool:
        while data:
            if self._expired():
                return False
            try:
                sent = dst.send(data)
            except TimeoutError:
                continue
            except OSError:
                return False
            data = data[sent:]
        return True

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        graced = [0]
        try:
            while not self._expired():
                try:
                    data = src.recv(self.buffer_bytes)
                except TimeoutError:
                    continue
                except OSError:
                    return
                if not data or not self._send(dst, data, graced):
                    return
        finally:
            self._drop(src, dst)

    def _drop(self, *socks: socket.socket) -> None:
        for sock in socks:
            with self._lock:
                self._sockets.discard(sock)
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()

    def close(self, join: bool = True) -> None:
        """Stop accepting, close every connection and (``join``) wait for the threads; idempotent."""
        self._stop.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            socks = list(self._sockets)
            threads = list(self._threads)
        self._drop(*socks)
        if join:
            current = threading.current_thread()
            for thread in [self._accepter, *threads]:
                if thread is not current:
                    thread.join(timeout=5)

    def __enter__(self) -> TrickleProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class TimedTask:
    """One task as its caller saw it: how long ``submit_*`` took, how long after the submit
    began the task completed, and its result."""

    submit_s: float
    done_s: float
    result: Any


def timed_task(adapter: Any, kind: str, keys: Sequence[Any], objects: Sequence[Any] = (),
               timeout: float = 120.0) -> TimedTask:
    """Submit one ``kind`` task (``"store"``, ``"load"`` or ``"lookup"``), wait for it (at most
    ``timeout`` seconds, then ``TimeoutError``) and time both; for an adapter whose store queue
    only this caller drains."""
    from lmserde.l2 import wait_for_load, wait_for_lookup, wait_for_store

    started = time.monotonic()
    if kind == "store":
        task = adapter.submit_store_task(list(keys), list(objects))
    elif kind == "load":
        task = adapter.submit_load_task(list(keys), list(objects))
    elif kind == "lookup":
        task = adapter.submit_lookup_and_lock_task(list(keys))
    else:
        raise ValueError(f"kind must be 'store', 'load' or 'lookup', got {kind!r}")
    submitted = time.monotonic()
    wait = {"store": wait_for_store, "load": wait_for_load, "lookup": wait_for_lookup}[kind]
    result = wait(adapter, task, timeout)
    return TimedTask(submitted - started, time.monotonic() - started, result)


@contextlib.contextmanager
def frozen_process(pid: int) -> Iterator[None]:
    """Freeze the server process ``pid`` (``SIGSTOP``: its sockets stay open, nothing answers)
    for the ``with`` block; it always resumes (``SIGCONT``) when the block ends."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def wait_until_idle(adapter: Any, timeout: float = 60.0) -> None:
    """Wait until ``adapter.report_status()["io_jobs_running"]`` is 0 (its I/O threads are
    free again); ``AssertionError`` after ``timeout`` seconds."""
    end = time.monotonic() + timeout
    while adapter.report_status()["io_jobs_running"]:
        assert time.monotonic() < end, "I/O jobs were still running"
        time.sleep(0.02)
