"""``redis``: an L2 adapter storing each object as one Redis string, on a server or a cluster."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from lmserde import MemoryLayoutDesc, MemoryObj, ObjectKey
from lmserde.l2 import (
    DEFAULT_TASK_DEADLINE_S,
    AdapterHealth,
    AdapterIOPool,
    AdapterTaskQueues,
    Bitmap,
    KeyPins,
    L2AdapterInterface,
    L2StoreResult,
    L2TaskId,
    QueuedResults,
    TaskGate,
    check_keys_and_objects,
)

from lmserde_redis import abortable
from lmserde_redis.connection import RedisClientHolder, RedisConnectionSettings
from lmserde_redis.key_names import RedisKeyNamer

__all__ = ["RedisL2Adapter"]

_log = logging.getLogger("lmserde_redis")

T = TypeVar("T")


def _byte_view(obj: MemoryObj) -> memoryview:
    return memoryview(obj.byte_array).cast("B")


class RedisL2Adapter(QueuedResults, L2AdapterInterface):
    """Stores each object's ``get_size()`` bytes as one Redis string under a namespaced key.

    * **Store**: pipelined ``SET`` (with ``PX`` when ``ttl_seconds`` > 0), in batches of at most
      ``batch_keys`` keys and ``batch_bytes`` bytes per round trip. A task succeeds when every
      ``SET`` did; a key stored again is overwritten (atomically: a plain ``SET``), so the
      adapter offers :meth:`replace_existing_on_store` as a no-cost switch. Each batch is copied
      out of the caller's objects before it is sent (see *Deadlines*).
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
      next operation reconnects. Work runs on ``io_workers`` threads; ``submit_*`` never touches
      the network (not even to connect) and never waits for a worker.
    * **Deadlines**: every task completes within ``task_deadline_s`` of its submission: when it
      passes, the task completes as failed (store ``False``, lookup and load all misses) even if
      its worker is still in a socket call, and the worker's later answer is discarded. Workers
      touch the caller's objects only while their task is unreported (a load copies each value
      into its destination, a store copies each batch out of its objects, both under the task's
      gate, see :class:`lmserde.l2.TaskGate`): once a task was reported, failed or not, its
      buffers are the caller's again. A store reported failed at its deadline may still land
      later, complete (it sends a private copy). At the deadline the task's round trip in
      progress is aborted (:mod:`lmserde_redis.abortable`), which frees its worker.
      :meth:`get_object_sizes` and :meth:`delete` run on the workers too and wait at most
      ``task_deadline_s``.
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
        task_deadline_s: float = DEFAULT_TASK_DEADLINE_S,
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
        self._health = AdapterHealth("redis", settings.describe(), logger=_log,
                                     unit="operation")
        self._queues = AdapterTaskQueues()
        self._io = AdapterIOPool("lmserde-redis", workers=io_workers, deadline_s=task_deadline_s,
                                 owner="RedisL2Adapter", service="redis", logger=_log,
                                 on_deadline=lambda: self._count(deadline_failures=1))
        self._replacing = False
        self._state_lock = threading.Lock()
        self._pins = KeyPins()
        self._counts = {"stores": 0, "store_failures": 0, "objects_stored": 0, "load_hits": 0,
                        "load_misses": 0, "size_mismatches": 0, "lookups": 0, "lookup_hits": 0,
                        "deadline_failures": 0}

    # -- properties -----------------------------------------------------------------------------

    @property
    def settings(self) -> RedisConnectionSettings:
        return self._settings

    @property
    def namespace(self) -> str:
        return self._names.namespace

    @property
    def task_deadline_s(self) -> float:
        return self._io.deadline_s

    def redis_key(self, key: ObjectKey) -> bytes:
        """The Redis key name ``key`` is stored under."""
        return self._names.name_of(key)

    # -- plumbing -------------------------------------------------------------------------------

    def _count(self, **deltas: int) -> None:
        with self._state_lock:
            for name, delta in deltas.items():
                self._counts[name] += delta

    def _submit(self, run: Callable[[], Any]) -> Any:
        """Queue ``run`` on the I/O threads (never blocks); its future."""
        return self._io.submit(run)

    def _gate(self, deliver: Callable[[T], None], failure: Callable[[], T]) -> TaskGate[T]:
        """A deadline-guarded gate; its failure result counts as a deadline failure."""
        return self._io.start_task(deliver, failure)

    def _bounded(self, run: Callable[[TaskGate[None]], None]) -> None:
        """Run ``run(gate)`` on the I/O threads and wait for it at most ``task_deadline_s``; at
        the deadline ``gate`` aborts the round trip ``run`` has in progress."""
        gate = self._io.untracked_gate()
        future = self._submit(lambda: run(gate))
        if self._io.wait_bounded([future]):
            _log.warning("redis adapter: a synchronous call passed its %.3g s deadline",
                         self._io.deadline_s)
            gate.expire()  # aborts the round trip now, whether or not the watcher got here first
        else:
            gate.finish(None)

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

    def _pipeline(self, operation: str, fill: Callable[[Any], None],
                  gate: TaskGate[Any] | None = None) -> list[Any]:
        """Run one pipeline; a transport failure raises, per-command errors come back as values.

        With ``gate``, the task's deadline aborts the round trip (its socket is shut down, its
        retries fail at once; see :mod:`lmserde_redis.abortable`)."""
        pipe = self._clients.get().pipeline(transaction=False)
        fill(pipe)
        with abortable.scope() as current:
            unregister = gate.on_expire(current.abort) if gate is not None else None
            try:
                return list(pipe.execute(raise_on_error=False))
            finally:
                if unregister is not None:
                    unregister()
                pipe.reset()

    # -- store ----------------------------------------------------------------------------------

    def submit_store_task(
        self, keys: Sequence[ObjectKey], objects: Sequence[MemoryObj]
    ) -> L2TaskId:
        check_keys_and_objects(keys, objects, "submit_store_task")
        task_id = self._queues.new_task_id()
        keys, objects = list(keys), list(objects)

        def deliver(result: L2StoreResult) -> None:
            self._count(stores=1, store_failures=0 if result.is_successful() else 1)
            self._queues.store.complete(task_id, result)

        gate = self._gate(deliver, lambda: L2StoreResult(False, 0))

        def run() -> None:
            result = L2StoreResult(False, 0)
            try:
                if gate.is_open:  # a task that waited past its deadline is not sent
                    result = self._store(keys, objects, gate)
            except Exception as exc:  # never leave a task unfinished
                _log.exception("redis store task %d failed unexpectedly: %s", task_id, exc)
            finally:
                gate.finish(result)

        self._submit(run)
        return task_id

    def _store(self, keys: list[ObjectKey], objects: list[MemoryObj], gate: TaskGate[Any]
               ) -> L2StoreResult:
        sizes = [int(obj.get_size()) for obj in objects]
        names = [self._names.name_of(k) for k in keys]
        stored: list[int] = []
        ok = True
        for batch in self._batches(sizes):
            # copy the batch out of the caller's objects while the task is unreported: a send
            # that outlives the deadline then reads only this private copy
            still_open, values = gate.while_open(
                lambda batch=batch: [bytes(_byte_view(objects[i])) for i in batch])
            if not still_open or values is None:
                ok = False
                break

            def fill(pipe: Any, batch: list[int] = batch, values: list[bytes] = values) -> None:
                for i, value in zip(batch, values):
                    if self._ttl_ms:
                        pipe.set(names[i], value, px=self._ttl_ms)
                    else:
                        pipe.set(names[i], value)

            try:
                replies = self._pipeline("store", fill, gate)
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

        def deliver(bitmap: Bitmap) -> None:
            self._count(lookups=len(keys), lookup_hits=bitmap.count())
            self._queues.lookup.complete(task_id, bitmap)

        gate = self._gate(deliver, lambda: Bitmap(len(keys)))

        def run() -> None:
            bitmap = Bitmap(len(keys))
            try:
                if gate.is_open:
                    bitmap = self._lookup(keys, gate)
            except Exception as exc:
                _log.exception("redis lookup task %d failed unexpectedly: %s", task_id, exc)
            finally:
                hits = [keys[i] for i in bitmap.set_indices()]
                gate.finish(bitmap, before=lambda: self._pin(hits))  # late hits are not pinned

        self._submit(run)
        return task_id

    def _pin(self, keys: list[ObjectKey]) -> None:
        with self._state_lock:
            for key in keys:
                self._pins.pin(key)

    def _lookup(self, keys: list[ObjectKey], gate: TaskGate[Any]) -> Bitmap:
        bitmap = Bitmap(len(keys))
        names = [self._names.name_of(k) for k in keys]
        for batch in self._batches([0] * len(keys)):
            if not gate.is_open:
                break

            def fill(pipe: Any, batch: list[int] = batch) -> None:
                for i in batch:
                    if self._ttl_ms:
                        pipe.pexpire(names[i], self._ttl_ms)
                    else:
                        pipe.exists(names[i])

            try:
                replies = self._pipeline("lookup", fill, gate)
            except Exception as exc:
                self._health.failure("lookup", exc)
                continue
            self._health.success()
            for i, reply in zip(batch, replies):
                if reply is True or (isinstance(reply, int) and reply > 0):
                    bitmap.set(i)
        return bitmap

    def submit_unlock(self, keys: Sequence[ObjectKey]) -> None:
        with self._state_lock:
            release = self._pins.unpin(keys)
        if release:
            self._io.submit_detached(lambda: self._delete_now(release),
                                     f"a deferred delete of {len(release)} key(s)")

    # -- load -----------------------------------------------------------------------------------

    def submit_load_task(
        self, keys: Sequence[ObjectKey], objects: Sequence[MemoryObj]
    ) -> L2TaskId:
        check_keys_and_objects(keys, objects, "submit_load_task")
        task_id = self._queues.new_task_id()
        keys, objects = list(keys), list(objects)

        def deliver(bitmap: Bitmap) -> None:
            self._count(load_hits=bitmap.count(), load_misses=len(keys) - bitmap.count())
            self._queues.load.complete(task_id, bitmap)

        gate = self._gate(deliver, lambda: Bitmap(len(keys)))

        def run() -> None:
            bitmap = Bitmap(len(keys))
            try:
                if gate.is_open:
                    bitmap = self._load(keys, objects, gate)
            except Exception as exc:
                _log.exception("redis load task %d failed unexpectedly: %s", task_id, exc)
                bitmap = Bitmap(len(keys))
            finally:
                if gate.finish(bitmap) and bitmap.count():
                    self._notify_keys_accessed([keys[i] for i in bitmap.set_indices()])

        self._submit(run)
        return task_id

    def _load(self, keys: list[ObjectKey], objects: list[MemoryObj], gate: TaskGate[Any]
              ) -> Bitmap:
        """Hits copied into their destinations, each copy made only while the task is open."""
        bitmap = Bitmap(len(keys))
        names = [self._names.name_of(k) for k in keys]
        sizes = [int(obj.get_size()) for obj in objects]
        for batch in self._batches(sizes):
            if not gate.is_open:
                break

            def fill(pipe: Any, batch: list[int] = batch) -> None:
                for i in batch:
                    pipe.get(names[i])

            try:
                replies = self._pipeline("load", fill, gate)
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
                    copied, _ = gate.while_open(
                        lambda i=i, value=value: _byte_view(objects[i]).__setitem__(
                            slice(None), value))
                    if not copied:  # reported at its deadline: the buffer is the caller's
                        return Bitmap(len(keys))
                bitmap.set(i)
        return bitmap

    # -- sizes, delete, listing -----------------------------------------------------------------

    def reports_object_sizes(self) -> bool:
        return True

    def get_object_sizes(self, keys: Sequence[ObjectKey]) -> dict[ObjectKey, int]:
        """Stored lengths of the keys that exist and answered in time (``{}`` for all of them if
        Redis is unreachable).

        Synchronous: pipelined ``STRLEN`` round trips (one per batch) on an I/O thread; waits at
        most ``task_deadline_s`` and then returns the batches that had answered.
        """
        keys = list(keys)
        names = [self._names.name_of(k) for k in keys]
        found: dict[ObjectKey, int] = {}
        lock = threading.Lock()

        def run(gate: TaskGate[None]) -> None:
            for batch_sizes in self._stored_lengths(keys, names, gate):
                with lock:
                    found.update(batch_sizes)

        self._bounded(run)
        with lock:
            return dict(found)

    def _stored_lengths(self, keys: list[ObjectKey], names: list[bytes], gate: TaskGate[None]
                        ) -> Iterator[dict[ObjectKey, int]]:
        """The stored sizes, one dict per batch as it answers."""
        empty: list[int] = []
        try:
            for batch in self._batches([0] * len(keys)):
                replies = self._pipeline(
                    "sizes", lambda pipe, batch=batch: [pipe.strlen(names[i]) for i in batch],
                    gate)
                yield {keys[i]: reply for i, reply in zip(batch, replies)
                       if isinstance(reply, int) and not isinstance(reply, bool) and reply > 0}
                empty += [i for i, reply in zip(batch, replies) if reply == 0]
            if empty:  # STRLEN is 0 for an empty value and for a missing key alike
                replies = self._pipeline(
                    "sizes", lambda pipe: [pipe.exists(names[i]) for i in empty], gate)
                yield {keys[i]: 0 for i, reply in zip(empty, replies)
                       if isinstance(reply, int) and reply > 0}
        except Exception as exc:
            self._health.failure("get_object_sizes", exc)
            return
        self._health.success()

    def delete(self, keys: Sequence[ObjectKey]) -> None:
        """Delete keys now; keys locked by a lookup of this adapter go at their last unlock.

        Runs on an I/O thread and waits for it at most ``task_deadline_s``; a delete cut off by
        the deadline may not have happened (a load that finds a damaged object deletes it
        again)."""
        with self._state_lock:
            now = self._pins.defer_pinned(keys)
        if now:
            self._bounded(lambda gate: self._delete_now(now, gate))

    def _delete_now(self, keys: list[ObjectKey], gate: TaskGate[None] | None = None) -> None:
        names = [self._names.name_of(k) for k in keys]
        deleted: list[ObjectKey] = []
        try:
            for batch in self._batches([0] * len(keys)):
                replies = self._pipeline(
                    "delete", lambda pipe, batch=batch: [pipe.delete(names[i]) for i in batch],
                    gate)
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
        closed = self._io.closed
        status.update(counts)
        status.update(
            is_healthy=self._health.healthy and not closed,
            endpoint=self._settings.describe(),
            mode="cluster" if self._settings.is_cluster else "standalone",
            namespace=self.namespace,
            ttl_seconds=self._ttl_ms / 1000.0,
            locked_keys=locked,
            task_deadline_s=self._io.deadline_s,
            replacing_stores=self._replacing,
            io_jobs_running=self._io.running,
            health=self._health.snapshot(),
        )
        return status

    def replace_existing_on_store(self) -> bool:
        """Replacing stores (see :mod:`lmserde.l2.contract.replacing_store`): a Redis ``SET``
        already replaces a key's value atomically, so this only records the switch."""
        self._replacing = True
        return True

    def close(self) -> None:
        """Let running tasks finish (waiting at most ``task_deadline_s``), drop queued ones, close
        connections (which ends any socket call still running), join the I/O threads and close
        the fds; idempotent. Tasks that had not been reported by then are never reported."""
        if self._io.close(self._clients.close):
            self._queues.close()
