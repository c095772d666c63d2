"""Payload work split into chunks, claimed dynamically by the calling thread and pool helpers.

A :class:`ChunkedRun` covers ``[0, n)`` with chunks; a chunk job ``job(start, stop)`` handles one
(copy K bytes, encode or decode V, hash) and usually returns the CRC-32 of the payload bytes it
produced or read, computed right after the work while they are still in cache. Helpers submitted
to a shared pool and the calling thread (:meth:`ChunkedRun.help`) take the next unclaimed chunk
until none is left, so work is balanced however late a helper starts: on a busy machine the
caller simply does more chunks itself instead of waiting for a sleeping thread. A helper that
starts after every chunk is claimed returns at once without touching any buffer.

The jobs' heavy calls (``ctypes.memmove``, the fp8 kernels, zlib's CRC) release the GIL, so chunks
run in parallel; none of them starts OpenMP teams, so the pool never fights torch's intra-op
threads for the cores.

CRC-32 backend: ``isal`` (ISA-L, carry-less-multiply folding, about 4x zlib's speed; a dependency
of this package) when it can be imported, else ``zlib``. Both compute the same IEEE CRC-32;
``CRC32_BACKEND`` names the one in use. ``isal`` holds the GIL while hashing (briefly: about
0.1 ms per MiB); ``zlib`` releases it for large buffers.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import threading
import zlib
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any

from lmserde_asym_k16_v8.crc32 import crc32_combine

try:  # the same CRC-32 as zlib.crc32, several times faster
    from isal.isal_zlib import crc32 as _crc32

    CRC32_BACKEND = "isal"
except ImportError:  # pragma: no cover - depends on the environment
    _crc32 = zlib.crc32
    CRC32_BACKEND = "zlib"

__all__ = [
    "CHUNK_BYTES",
    "CRC32_BACKEND",
    "MIN_CHUNK_BYTES",
    "ChunkJob",
    "ChunkedRun",
    "chunk_for",
    "copy_and_crc32",
    "crc32_of_runs",
    "crc32_at",
    "shared_pool",
]

CHUNK_BYTES = 1024 * 1024
"""Target chunk size in payload bytes: small enough to be hashed while in cache and to balance
the load, large enough that per-chunk overhead (tens of microseconds) stays negligible."""

MIN_CHUNK_BYTES = 256 * 1024
"""Payloads below twice this size are one chunk, done by the caller alone."""

ChunkJob = Callable[[int, int], Any]


def chunk_for(n: int, helpers: int) -> int:
    """One chunk per participant (``helpers`` + the caller), never below ``MIN_CHUNK_BYTES``.

    Finer V chunks (2 or 4 per participant, now that an fp8 call costs ~5 us of Python) measured
    no faster on a 2-core machine, so the split stays one chunk each.
    """
    return max(MIN_CHUNK_BYTES, -(-n // (helpers + 1)))


class ChunkedRun:
    """``job`` over the chunks of ``[0, n)``, each chunk done exactly once by whoever claims it.

    ``chunk`` is the chunk length in job units. Results are kept in chunk order; a job's exception
    is kept too and re-raised by :meth:`values` once every chunk has finished.
    """

    def __init__(self, job: ChunkJob, n: int, chunk: int) -> None:
        if n <= 0:
            bounds: list[tuple[int, int]] = []
        elif n < 2 * MIN_CHUNK_BYTES or chunk >= n:
            bounds = [(0, n)]
        else:
            chunk = max(chunk, 1)
            bounds = [(a, min(a + chunk, n)) for a in range(0, n, chunk)]
        self._job = job
        self.bounds = bounds
        self._claims = itertools.count()  # next() is atomic under the GIL
        self._results: list[Any] = [None] * len(bounds)
        self._errors: list[BaseException | None] = [None] * len(bounds)
        self._lock = threading.Lock()
        self._pending = len(bounds)
        # only a run that helpers may join needs an event; a single chunk is always done inline
        self._finished = threading.Event() if len(bounds) > 1 else None

    def help(self) -> None:
        """Do unclaimed chunks on the calling thread until none is left."""
        n = len(self.bounds)
        while True:
            i = next(self._claims)
            if i >= n:
                return
            a, b = self.bounds[i]
            try:
                self._results[i] = self._job(a, b)
            except BaseException as exc:  # kept for values(); the run must still finish
                self._errors[i] = exc
            finally:
                self._chunk_done()

    def _chunk_done(self) -> None:
        with self._lock:
            self._pending -= 1
            if self._pending == 0 and self._finished is not None:
                self._finished.set()

    def cancel(self) -> None:
        """Claim every chunk not yet started so it never runs, then wait for those running.

        After a failure elsewhere: once this returns, no job of this run touches any buffer.
        """
        n = len(self.bounds)
        while True:
            i = next(self._claims)
            if i >= n:
                break
            self._chunk_done()
        self.wait()

    def start_helpers(self, pool: Executor | None, helpers: int) -> None:
        """Submit up to ``helpers`` helper tasks (never more than chunks beyond the first)."""
        if pool is None:
            return
        for _ in range(min(helpers, len(self.bounds) - 1)):
            pool.submit(self.help)

    def wait(self) -> None:
        """Block until every chunk has finished, successfully or not; never raises."""
        if self._finished is not None:
            self._finished.wait()

    def values(self) -> list[Any]:
        """Help, wait for every chunk, re-raise the first failure, else the results in order."""
        self.help()
        self.wait()
        for error in self._errors:
            if error is not None:
                raise error
        return list(self._results)

    def crc32(self, start: int = 0) -> int:
        """The chunk results joined as CRC-32s of consecutive byte runs, after CRC ``start``."""
        crc = start
        for value, (a, b) in zip(self.values(), self.bounds):
            crc = crc32_combine(crc, value, b - a)
        return crc


def crc32_of_runs(first: ChunkedRun, second: ChunkedRun, pool: Executor | None, helpers: int, *,
                  between: Callable[[], None] | None = None) -> int:
    """Run two payload parts with helpers, ``first`` then ``second``, and return the CRC-32 of
    their bytes in that order. ``between`` runs on this thread after ``first``'s helpers started
    and before ``second``'s (what ``second``'s jobs need and ``first``'s do not: the V scale).
    Whatever fails, both runs are cancelled and waited for before the error propagates, so no
    helper goes on reading or writing the caller's buffers."""
    try:
        first.start_helpers(pool, helpers)
        if between is not None:
            between()
        second.start_helpers(pool, helpers)
        return second.crc32(first.crc32())
    except BaseException:
        first.cancel()
        second.cancel()
        raise


def crc32_at(address: int, nbytes: int) -> int:
    """CRC-32 (zlib's) of ``nbytes`` of memory at ``address``."""
    if nbytes <= 0:
        return 0
    return _crc32((ctypes.c_char * nbytes).from_address(address))


def copy_and_crc32(dst_address: int, src_address: int, nbytes: int) -> int:
    """Copy ``nbytes`` (non-overlapping) and return their CRC-32, hashed from the fresh copy."""
    if nbytes <= 0:
        return 0
    ctypes.memmove(dst_address, src_address, nbytes)  # a ctypes foreign call: releases the GIL
    return crc32_at(dst_address, nbytes)


_pool_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_pool_pid = -1
_pool_helpers = 0


def shared_pool() -> tuple[ThreadPoolExecutor, int]:
    """The process-wide helper pool and the helpers one run should use, created on first use.

    The pool has ``min(8, cpus)`` threads, shared by every serde instance so that many processors
    never multiply threads; one run uses ``cpus - 1`` helpers at most (the caller works too). A
    forked child gets a fresh pool (worker threads do not survive ``fork``).
    """
    global _pool, _pool_pid, _pool_helpers
    pool = _pool
    if pool is not None and _pool_pid == os.getpid():
        return pool, _pool_helpers
    with _pool_lock:
        if _pool is None or _pool_pid != os.getpid():
            cpus = os.cpu_count() or 1
            threads = max(1, min(8, cpus))
            _pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="lmserde-asym")
            _pool_helpers = min(threads, max(cpus - 1, 0))
            _pool_pid = os.getpid()
        return _pool, _pool_helpers
