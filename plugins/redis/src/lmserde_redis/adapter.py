"""``redis``: an L2 adapter storing each object as one Redis string, on a server or a cluster."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from lmserde import MemoryLayoutDesc, MemoryObj, ObjectKey
from lmserde.l2 import (
    AdapterTaskQueues,
    Bitmap,
    KeyPins,
    L2AdapterInterface,
    L2StoreResult,
    L2TaskId,
    QueuedResults,
)

from lmserde_redis.connection import RedisClientHolder, RedisConnectionSettings
from lmserde_redis.health import HealthTracker
from lmserde_redis.key_names import RedisKeyNamer

__all__ = ["RedisL2Adapter"]

_log = logging.getLogger("lmserde_redis")

T = TypeVar("T")


def _check_aligned(keys: Sequence[Any], objects: Sequence[Any], what: str) -> None:
    if len(keys) != len(objects):
        raise ValueError(f"{what} got {len(keys)} keys but {len(objects)} objects")


def _byte_view(obj: MemoryObj) -> memoryview:
    return memoryview(obj.byte_array).cast("B")


class RedisL2Adapter(QueuedResults, L2AdapterInterface):
    """Stores each object's ``get_size()`` bytes as one Redis string under a namespaced key.

    * **Store**: pipelined ``SET`` (with ``PX`` when ``ttl_seconds`` > 0), in batches of at most
      ``batch_keys`` keys and ``batch_bytes`` bytes per round trip. A task succeeds when every
      ``SET`` did; a key stored again is overwritten.
    * **Load**: pipelined ``GET``; a key is a hit only when the stored length equals the
      destination's ``get_size()`` (the exact-length contract of ``fs``), so a wrapped serde
      never reads a truncated or foreign payload.
    * **Sizes**: :meth:`get_object_sizes` reports stored lengths (``STRLEN``), which lets the serde
      wrapper narrow load buffers; ``UPPER_BOUND`` serdes therefore work on Redis.
    * **Lookup and lock**: ``EXISTS`` (``PEXPIRE`` with a TTL, which also keeps the key alive).
      Locks are held in this process: a locked key is not deleted by this adapter's
      :meth:`delete` until it is unlocked, but Redis itself may still evict it under its
      ``maxmemory`` policy and other clients may delete it; such a key becomes a load miss.
    * **Failures**: a connection error, timeout or cluster outage fails the affected store task
      and turns the affected keys of a lookup or load into misses; tasks always complete. The
      next operation reconnects. Work runs on ``io_workers`` threads; ``submit_*`` never waits
      for the network (``get_object_sizes`` and :meth:`delete` do, bounded by the timeouts).
    """

    adapter_type = "redis"

    def __init__(
        self,
        settings: RedisConnectionSettings,
        *,
        namespace: str = "lmserde",
        ttl_seconds: float = 0.0,
        io_workers: int = 4,
        batch_keys: int = 64,
        batch_bytes: int = 64 << 20,
    ) -> None:
        super().__init__(0)
        if io_workers < 1:
            raise ValueError(f"redis adapter io_workers must be >= 1, got {io_workers}")
        if batch_keys < 1 or batch_bytes < 1:
            raise ValueError(
                f"redis adapter batch_keys and batch_bytes must be >= 1, got {batch_keys} and "
                f"{batch_bytes}"
            )
        if ttl_seconds < 0:
            raise ValueError(f"redis adapter ttl_seconds must be >= 0, got {ttl_seconds}")
        self._settings = settings
        self._names = RedisKeyNamer(namespace)
        self._ttl_ms = round(ttl_seconds * 1000)
        self._batch_keys = int(batch_keys)
        self._batch_bytes = int(batch_bytes)
        self._clients = RedisClientHolder(settings)
        self._health = HealthTracker(settings.describe())
        self._queues = AdapterTaskQueues()
        self._pool = ThreadPoolExecutor(max_workers=io_workers, thread_name_prefix="lmserde-redis")
        self._state_lock = threading.Lock()
        self._closed = False
        self._pins = KeyPins()
        self._counts = {"stores": 0, "store_failures": 0, "objects_stored": 0, "load_hits": 0,
                        "load_misses": 0, "size_mismatches": 0, "lookups": 0, "lookup_hits": 0}

    # -- properties -----------------------------------------------------------------------------

    @property
    def settings(self) -> RedisConnectionSettings:
        return self._settings

    @property
    def namespace(self) -> str:
        return self._names.namespace

    def redis_key(self, key: ObjectKey) -> bytes:
        """The Redis key name ``key`` is stored under."""
        return self._names.name_of(key)

    # -- plumbing -------------------------------------------------------------------------------

    def _count(self, **deltas: int) -> None:
        with self._state_lock:
            for name, delta in deltas.items():
                self._counts[name] += delta

    def _submit(self, run: Callable[[], None]) -> None:
        with self._state_lock:
            if self._closed:
                raise RuntimeError("RedisL2Adapter is closed")
            self._pool.submit(run)

    def _batches(self, sizes: Sequence[int]) -> Iterator[list[int]]:
        """Index batches of at most ``batch_keys`` items and ``batch_bytes`` bytes (>= 1 item)."""
        batch: list[int] = []
        nbytes = 0
        for i, size in enumerate(sizes):
            if batch and (len(batch) >= self._batch_keys or nbytes + size > self._batch_bytes):
                yield batch
                batch, nbytes = [], 0
            batch.append(i)
            nbytes += size
        if batch:
            yield batch

    def _pipeline(self, operation: str, fill: Callable[[Any], None]) -> list[Any]:
        """Run one pipeline; a transport failure raises, per-command errors come back as values."""
        pipe = self._clients.get().pipeline(transaction=False)
        fill(pipe)
        try:
            return list(pipe.execute(raise_on_error=False))
        finally:
            pipe.reset()

    # -- store ----------------------------------------------------------------------------------

    def submit_store_task(
        self, keys: Sequence[ObjectKey], objects: Sequence[MemoryObj]
    ) -> L2TaskId:
        _check_aligned(keys, objects, "submit_store_task")
        task_id = self._queues.new_task_id()
        keys, objects = list(keys), list(objects)

        def run() -> None:
            result = L2StoreResult(False, 0)
            try:
                result = self._store(keys, objects)
            except Exception as exc:  # never leave a task unfinished
                _log.exception("redis store task %d failed unexpectedly: %s", task_id, exc)
            finally:
                self._count(stores=1, store_failures=0 if result.is_successful() else 1)
                self._queues.store.complete(task_id, result)

        self._submit(run)
        return task_id

    def _store(self, keys: list[ObjectKey], objects: list[MemoryObj]) -> L2StoreResult:
        sizes = [int(obj.get_size()) for obj in objects]
        names = [self._names.name_of(k) for k in keys]
        stored: list[int] = []
        ok = True
        for batch in self._batches(sizes):

            def fill(pipe: Any, batch: list[int] = batch) -> None:
                for i in batch:
                    if self._ttl_ms:
                        pipe.set(names[i], _byte_view(objects[i]), px=self._ttl_ms)
                    else:
                        pipe.set(names[i], _byte_view(objects[i]))

            try:
                replies = self._pipeline("store", fill)
            except Exception as exc:
                self._health.failure("store", exc)
                ok = False
                break
            self._health.success()
            refused = {i: reply for i, reply in zip(batch, replies) if reply is not True}
            stored += [i for i in batch if i not in refused]
            if refused:
                i, reply = next(iter(refused.items()))
                _log.warning("redis refused %d SET(s) of a store task, e.g. %r: %r",
                             len(refused), names[i], reply)
                ok = False
                break
        if stored:
            self._count(objects_stored=len(stored))
            self._notify_keys_stored([keys[i] for i in stored], [sizes[i] for i in stored])
        return L2StoreResult(True, sum(sizes)) if ok else L2StoreResult(False, 0)

    # -- lookup / lock --------------------------------------------------------------------------

    def submit_lookup_and_lock_task(
        self,
        keys: Sequence[ObjectKey],
        group_layout_descs: dict[int, MemoryLayoutDesc] | None = None,
    ) -> L2TaskId:
        task_id = self._queues.new_task_id()
        keys = list(keys)

        def run() -> None:
            bitmap = Bitmap(len(keys))
            try:
                bitmap = self._lookup(keys)
            except Exception as exc:
                _log.exception("redis lookup task %d failed unexpectedly: %s", task_id, exc)
            finally:
                self._count(lookups=len(keys), lookup_hits=bitmap.count())
                self._queues.lookup.complete(task_id, bitmap)

        self._submit(run)
        return task_id

    def _lookup(self, keys: list[ObjectKey]) -> Bitmap:
        bitmap = Bitmap(len(keys))
        names = [self._names.name_of(k) for k in keys]
        for batch in self._batches([0] * len(keys)):

            def fill(pipe: Any, batch: list[int] = batch) -> None:
                for i in batch:
                    if self._ttl_ms:
                        pipe.pexpire(names[i], self._ttl_ms)
                    else:
                        pipe.exists(names[i])

            try:
                replies = self._pipeline("lookup", fill)
            except Exception as exc:
                self._health.failure("lookup", exc)
                continue
            self._health.success()
            for i, reply in zip(batch, replies):
                if reply is True or (isinstance(reply, int) and reply > 0):
                    bitmap.set(i)
        hits = [keys[i] for i in bitmap.set_indices()]
        with self._state_lock:
            for key in hits:
                self._pins.pin(key)
        return bitmap

    def submit_unlock(self, keys: Sequence[ObjectKey]) -> None:
        with self._state_lock:
            release = self._pins.unpin(keys)
            closed = self._closed
        if release and not closed:
            try:
                self._pool.submit(self._delete_now, release)
            except RuntimeError:  # closed meanwhile: the deferred delete is dropped
                _log.debug("redis adapter closed before a deferred delete of %d key(s)",
                           len(release))

    # -- load -----------------------------------------------------------------------------------

    def submit_load_task(
        self, keys: Sequence[ObjectKey], objects: Sequence[MemoryObj]
    ) -> L2TaskId:
        _check_aligned(keys, objects, "submit_load_task")
        task_id = self._queues.new_task_id()
        keys, objects = list(keys), list(objects)

        def run() -> None:
            bitmap = Bitmap(len(keys))
            try:
                bitmap = self._load(keys, objects)
            except Exception as exc:
                _log.exception("redis load task %d failed unexpectedly: %s", task_id, exc)
            finally:
                self._count(load_hits=bitmap.count(), load_misses=len(keys) - bitmap.count())
                self._queues.load.complete(task_id, bitmap)

        self._submit(run)
        return task_id

    def _load(self, keys: list[ObjectKey], objects: list[MemoryObj]) -> Bitmap:
        bitmap = Bitmap(len(keys))
        names = [self._names.name_of(k) for k in keys]
        sizes = [int(obj.get_size()) for obj in objects]
        for batch in self._batches(sizes):

            def fill(pipe: Any, batch: list[int] = batch) -> None:
                for i in batch:
                    pipe.get(names[i])

            try:
                replies = self._pipeline("load", fill)
            except Exception as exc:
                self._health.failure("load", exc)
                continue
            self._health.success()
            for i, value in zip(batch, replies):
                if not isinstance(value, bytes):
                    continue  # absent key, or a per-command error
                if len(value) != sizes[i]:
                    self._count(size_mismatches=1)
                    _log.debug("redis key %r holds %d bytes, destination expects %d: miss",
                               names[i], len(value), sizes[i])
                    continue
                if sizes[i]:
                    _byte_view(objects[i])[:] = value
                bitmap.set(i)
        accessed = [keys[i] for i in bitmap.set_indices()]
        if accessed:
            self._notify_keys_accessed(accessed)
        return bitmap

    # -- sizes, delete, listing -----------------------------------------------------------------

    def reports_object_sizes(self) -> bool:
        return True

    def get_object_sizes(self, keys: Sequence[ObjectKey]) -> dict[ObjectKey, int]:
        """Stored lengths of the keys that exist (``{}`` for all of them if Redis is unreachable).

        Synchronous: one pipelined ``STRLEN`` round trip per batch, bounded by the timeouts.
        """
        keys = list(keys)
        names = [self._names.name_of(k) for k in keys]
        sizes: dict[ObjectKey, int] = {}
        empty: list[int] = []
        try:
            for batch in self._batches([0] * len(keys)):
                replies = self._pipeline(
                    "sizes", lambda pipe, batch=batch: [pipe.strlen(names[i]) for i in batch])
                for i, reply in zip(batch, replies):
                    if isinstance(reply, int) and reply > 0:
                        sizes[keys[i]] = reply
                    elif reply == 0:
                        empty.append(i)
            if empty:  # STRLEN is 0 for an empty value and for a missing key alike
                replies = self._pipeline(
                    "sizes", lambda pipe: [pipe.exists(names[i]) for i in empty])
                for i, reply in zip(empty, replies):
                    if isinstance(reply, int) and reply > 0:
                        sizes[keys[i]] = 0
        except Exception as exc:
            self._health.failure("get_object_sizes", exc)
            return {}
        self._health.success()
        return sizes

    def delete(self, keys: Sequence[ObjectKey]) -> None:
        """Delete keys now; keys locked by a lookup of this adapter go at their last unlock."""
        with self._state_lock:
            now = self._pins.defer_pinned(keys)
        if now:
            self._delete_now(now)

    def _delete_now(self, keys: list[ObjectKey]) -> None:
        names = [self._names.name_of(k) for k in keys]
        deleted: list[ObjectKey] = []
        try:
            for batch in self._batches([0] * len(keys)):
                replies = self._pipeline(
                    "delete", lambda pipe, batch=batch: [pipe.delete(names[i]) for i in batch])
                deleted += [keys[i] for i, r in zip(batch, replies) if isinstance(r, int) and r > 0]
        except Exception as exc:
            self._health.failure("delete", exc)
        if deleted:
            self._notify_keys_deleted(deleted)

    def touch_keys(self, keys: Sequence[ObjectKey]) -> None:
        """With a TTL, push the keys' expiry out again (asynchronously); otherwise a no-op."""
        if not self._ttl_ms or not keys:
            return
        names = [self._names.name_of(k) for k in keys]

        def run() -> None:
            try:
                self._pipeline("touch", lambda pipe: [pipe.pexpire(n, self._ttl_ms) for n in names])
            except Exception as exc:
                self._health.failure("touch", exc)

        try:
            self._submit(run)
        except RuntimeError:
            pass  # closed: a recency hint may be dropped

    def list_l2_keys(self, model_name: str | None = None, *args: Any, **kwargs: Any
                     ) -> list[ObjectKey]:
        """Every key of this namespace (optionally of one model), by ``SCAN`` over every shard.

        Names in the namespace that are not object-key names are skipped.
        """
        found: list[ObjectKey] = []
        for name in self._clients.get().scan_iter(match=self._names.scan_pattern(), count=1000):
            try:
                key = self._names.key_of(name)
            except ValueError:
                continue
            if model_name is None or key.model_name == model_name:
                found.append(key)
        return found

    # -- status and lifecycle -------------------------------------------------------------------

    def report_status(self) -> dict[str, Any]:
        status = super().report_status()
        with self._state_lock:
            counts = dict(self._counts)
            locked = self._pins.pinned_count
            closed = self._closed
        status.update(counts)
        status.update(
            is_healthy=self._health.healthy and not closed,
            endpoint=self._settings.describe(),
            mode="cluster" if self._settings.is_cluster else "standalone",
            namespace=self.namespace,
            ttl_seconds=self._ttl_ms / 1000.0,
            locked_keys=locked,
            health=self._health.snapshot(),
        )
        return status

    def close(self) -> None:
        """Finish running tasks (bounded by the timeouts), drop queued ones, close connections and
        fds; idempotent. Tasks that had not started are never reported."""
        with self._state_lock:
            if self._closed:
                return
            self._closed = True
        self._pool.shutdown(wait=True, cancel_futures=True)
        try:
            self._clients.close()
        except Exception as exc:
            _log.debug("closing the redis client raised %s", exc)
        self._queues.close()
