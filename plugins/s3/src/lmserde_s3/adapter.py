"""``s3``: an L2 adapter storing each object as one object in an S3-compatible bucket."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any, TypeVar

from lmserde import MemoryLayoutDesc, MemoryObj, ObjectKey
from lmserde.l2 import (
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

from lmserde_s3.client import build_client, is_not_found, is_precondition_failed
from lmserde_s3.object_names import (
    SALT_METADATA,
    ObjectNamer,
    decode_salt_metadata,
    encode_salt_metadata,
    salt_tag,
)
from lmserde_s3.settings import S3Location, S3Settings

__all__ = ["S3L2Adapter"]

_log = logging.getLogger("lmserde_s3")

T = TypeVar("T")

_READ_CHUNK = 1 << 20
_DELETE_BATCH = 1000  # DeleteObjects' limit


class _TaskClosed(Exception):
    """The task was reported (at its deadline) while this job still had work: stop."""


def _body_aborter(body: Any) -> Callable[[], None]:
    """What ends a blocked read of ``body`` from another thread: urllib3's
    ``HTTPResponse.shutdown()`` (urllib3 >= 2.3) of botocore's raw stream, else nothing (the read
    then ends when the body does, each read bounded by ``read_timeout``)."""
    shutdown = getattr(getattr(body, "_raw_stream", None), "shutdown", None)
    return shutdown if callable(shutdown) else (lambda: None)


class _Countdown:
    """Runs ``finish`` once, when the last of ``n`` per-key jobs has called :meth:`done`."""

    def __init__(self, n: int, finish: Callable[[], None]) -> None:
        self._left = n
        self._lock = threading.Lock()
        self._finish = finish
        if n == 0:
            finish()

    def done(self) -> None:
        with self._lock:
            self._left -= 1
            last = self._left == 0
        if last:
            self._finish()


class S3L2Adapter(QueuedResults, L2AdapterInterface):
    """Stores each object's ``get_size()`` bytes as one object (see :mod:`lmserde_s3.object_names`
    for names and docs/plugins/s3.md for the full contract).

    * **Concurrency**: every key of every task is one request on one of ``max_in_flight`` I/O
      threads (the client's connection pool has as many connections); ``submit_*`` never touches
      the network and never waits for a thread. A task completes on the shared completion queues
      when its last key is done, or as failed at its deadline.
    * **Deadlines**: every task completes within ``task_deadline_s`` of its submission; past it
      the task completes as failed (store ``False``, lookup and load all misses) even if a request
      is still running, and the requests' later answers are discarded. Requests touch the
      caller's objects only while their task is unreported (a store copies the body out, a load
      copies each chunk in, under the task's gate, see :class:`lmserde.l2.TaskGate`), so a
      reported task's buffers are the caller's again at once. A store reported failed may still
      land later, complete (it sends a private copy).
    * **Store**: ``PutObject`` with ``If-None-Match: *`` (``conditional_writes``): a key that
      already exists is skipped, also across processes sharing the bucket, and counts as stored;
      without conditional writes a ``HeadObject`` decides (a race may then overwrite an equal
      object). A task succeeds when every key was stored or skipped; ``bytes_transferred`` counts
      the bytes written. A failed key (timeout, 5xx and throttling after the client's retries, a
      name too long) fails the task; the other keys are still stored. After
      :meth:`replace_existing_on_store` a store is a plain ``PutObject`` (no ``If-None-Match``, no
      ``HeadObject``): it replaces an existing object atomically, as S3 does every ``PUT``.
    * **Lookup and lock**: ``HeadObject``; hits are pinned in this process: :meth:`delete` of a
      pinned key waits for its last unlock (lifecycle rules or other clients may still remove it;
      it then becomes a load miss).
    * **Load**: ``GetObject``; a hit only when the object's length equals the destination's
      ``get_size()`` and exactly that many bytes arrived. Missing objects, wrong lengths, errors
      and timeouts are misses for that key only.
    * **Sizes, delete, listing**: :meth:`get_object_sizes` (``HeadObject``) and :meth:`delete`
      (``DeleteObjects``) run on the I/O threads and wait at most ``task_deadline_s``;
      :meth:`list_l2_keys` (``ListObjectsV2``) waits for the service, bounded by the timeouts
      and retries.
    """

    adapter_type = "s3"

    def __init__(self, settings: S3Settings, *, client: Any = None, session: Any = None) -> None:
        super().__init__(0)
        self._settings = settings
        if client is None:
            session, client = build_client(settings)
        self._session = session
        self._client = client
        self._namers: dict[str, ObjectNamer] = {}
        self._salts: dict[str, str] = {salt_tag(s): s for s in settings.tenant_routes}
        self._health = AdapterHealth("s3", settings.endpoint_url or "service", logger=_log,
                                     unit="request")
        self._queues = AdapterTaskQueues()
        self._io = AdapterIOPool("lmserde-s3", workers=settings.max_in_flight,
                                 deadline_s=settings.task_deadline_s, owner="S3L2Adapter",
                                 service="s3", logger=_log,
                                 on_deadline=lambda: self._count(deadline_failures=1))
        self._replacing = False
        self._state_lock = threading.Lock()
        self._pins = KeyPins()
        self._counts = {"stores": 0, "store_failures": 0, "objects_stored": 0,
                        "stores_skipped": 0, "key_store_errors": 0, "lookups": 0,
                        "lookup_hits": 0, "load_hits": 0, "load_misses": 0,
                        "size_mismatches": 0, "deadline_failures": 0}

    # -- names ----------------------------------------------------------------------------------

    @property
    def settings(self) -> S3Settings:
        return self._settings

    def location_of(self, key: ObjectKey) -> tuple[S3Location, str]:
        """``(location, object name)`` of ``key``; ``ValueError`` if the name is too long."""
        location = self._settings.location_for(key.cache_salt)
        namer = self._namers.get(location.prefix)
        if namer is None:
            namer = self._namers.setdefault(location.prefix, ObjectNamer(location.prefix))
        name = namer.name_of(key)
        if key.cache_salt:
            self._salts.setdefault(salt_tag(key.cache_salt), key.cache_salt)
        return location, name

    # -- fds ------------------------------------------------------------------------------------

    # -- plumbing -------------------------------------------------------------------------------

    def _count(self, **deltas: int) -> None:
        with self._state_lock:
            for name, delta in deltas.items():
                self._counts[name] += delta

    def _check_open(self) -> None:
        self._io.check_open()

    def _gate(self, deliver: Callable[[T], None], failure: Callable[[], T]) -> TaskGate[T]:
        """A deadline-guarded gate; its failure result counts as a deadline failure."""
        return self._io.start_task(deliver, failure)

    def _fan_out(self, n: int, job: Callable[[int], None], finish: Callable[[], None],
                 gate: TaskGate[Any]) -> None:
        """Run ``job(i)`` for ``i < n`` on the I/O threads, then ``finish()`` once; jobs that
        start after ``gate`` closed (their task passed its deadline) are skipped."""
        countdown = _Countdown(n, finish)

        def run(i: int) -> None:
            try:
                if gate.is_open:
                    job(i)
            except BaseException as exc:  # a job never leaves its task unfinished
                _log.exception("s3 adapter: unexpected error in a per-key job: %s", exc)
            finally:
                countdown.done()

        self._io.submit_all([lambda i=i: run(i) for i in range(n)])

    # -- store ----------------------------------------------------------------------------------

    def submit_store_task(
        self, keys: Sequence[ObjectKey], objects: Sequence[MemoryObj]
    ) -> L2TaskId:
        check_keys_and_objects(keys, objects, "submit_store_task")
        self._check_open()
        task_id = self._queues.new_task_id()
        keys, objects = list(keys), list(objects)
        written: list[int | None] = [None] * len(keys)  # bytes written; None: skipped/failed
        failed = [False] * len(keys)

        def deliver(result: L2StoreResult) -> None:
            self._count(stores=1, store_failures=0 if result.is_successful() else 1)
            self._queues.store.complete(task_id, result)

        gate = self._gate(deliver, lambda: L2StoreResult(False, 0))

        def job(i: int) -> None:
            try:
                written[i] = self._store_one(keys[i], objects[i], gate)
            except _TaskClosed:
                failed[i] = True
            except Exception as exc:
                failed[i] = True
                self._count(key_store_errors=1)
                self._health.failure("store", exc)

        def finish() -> None:
            ok = not any(failed)
            stored = [i for i, n in enumerate(written) if n is not None]
            if stored:
                self._notify_keys_stored([keys[i] for i in stored],
                                         [written[i] or 0 for i in stored])
            total = sum(n or 0 for n in written)
            gate.finish(L2StoreResult(ok, total if ok else 0))

        self._fan_out(len(keys), job, finish, gate)
        return task_id

    def _store_one(self, key: ObjectKey, obj: MemoryObj, gate: TaskGate[Any]) -> int | None:
        """Store one object; bytes written, ``None`` when it already existed (skipped).

        The body is copied out of ``obj`` while the task is unreported (``_TaskClosed`` once it
        was); the request then sends only that copy."""
        location, name = self.location_of(key)
        size = int(obj.get_size())
        conditional = self._settings.conditional_writes and not self._replacing
        if (not self._settings.conditional_writes and not self._replacing
                and self._head(location, name) is not None):
            self._count(stores_skipped=1)
            return None
        still_open, body = gate.while_open(
            lambda: bytes(memoryview(obj.byte_array).cast("B")[:size]) if size else b"")
        if not still_open or body is None:
            raise _TaskClosed
        kwargs: dict[str, Any] = {"Bucket": location.bucket, "Key": name, "Body": body}
        if key.cache_salt:
            kwargs["Metadata"] = {SALT_METADATA: encode_salt_metadata(key.cache_salt)}
        if conditional:
            kwargs["IfNoneMatch"] = "*"
        try:
            self._client.put_object(**kwargs)
        except Exception as exc:
            if is_precondition_failed(exc):
                self._health.success()
                self._count(stores_skipped=1)
                return None
            raise
        self._health.success()
        self._count(objects_stored=1)
        return size

    # -- lookup / lock --------------------------------------------------------------------------

    def _head(self, location: S3Location, name: str) -> dict[str, Any] | None:
        """``HeadObject``'s response, ``None`` for a missing object; other errors raise."""
        try:
            response: dict[str, Any] = self._client.head_object(Bucket=location.bucket, Key=name)
        except Exception as exc:
            if is_not_found(exc):
                self._health.success()
                return None
            raise
        self._health.success()
        return response

    def _head_key(self, key: ObjectKey, operation: str) -> dict[str, Any] | None:
        """``HeadObject`` of a key; ``None`` for missing, unnamed or unreachable objects."""
        try:
            location, name = self.location_of(key)
            return self._head(location, name)
        except Exception as exc:
            self._health.failure(operation, exc)
            return None

    def submit_lookup_and_lock_task(
        self,
        keys: Sequence[ObjectKey],
        group_layout_descs: dict[int, MemoryLayoutDesc] | None = None,
    ) -> L2TaskId:
        self._check_open()
        task_id = self._queues.new_task_id()
        keys = list(keys)
        bitmap = Bitmap(len(keys))
        bits_lock = threading.Lock()

        def deliver(result: Bitmap) -> None:
            self._count(lookups=len(keys), lookup_hits=result.count())
            self._queues.lookup.complete(task_id, result)

        gate = self._gate(deliver, lambda: Bitmap(len(keys)))

        def job(i: int) -> None:
            if self._head_key(keys[i], "lookup") is None:
                return
            with bits_lock:
                bitmap.set(i)

        def pin_hits() -> None:  # under the gate: hits of a task reported late are never pinned
            with self._state_lock:
                for i in bitmap.set_indices():
                    self._pins.pin(keys[i])

        def finish() -> None:
            gate.finish(bitmap, before=pin_hits)

        self._fan_out(len(keys), job, finish, gate)
        return task_id

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
        self._check_open()
        task_id = self._queues.new_task_id()
        keys, objects = list(keys), list(objects)
        bitmap = Bitmap(len(keys))
        bits_lock = threading.Lock()

        def deliver(result: Bitmap) -> None:
            hits = result.count()
            self._count(load_hits=hits, load_misses=len(keys) - hits)
            self._queues.load.complete(task_id, result)

        gate = self._gate(deliver, lambda: Bitmap(len(keys)))

        def job(i: int) -> None:
            try:
                hit = self._load_one(keys[i], objects[i], gate)
            except _TaskClosed:
                hit = False
            except Exception as exc:
                self._health.failure("load", exc)
                hit = False
            if hit:
                with bits_lock:
                    bitmap.set(i)

        def finish() -> None:
            if gate.finish(bitmap) and bitmap.count():
                self._notify_keys_accessed([keys[i] for i in bitmap.set_indices()])

        self._fan_out(len(keys), job, finish, gate)
        return task_id

    def _load_one(self, key: ObjectKey, dst: MemoryObj, gate: TaskGate[Any]) -> bool:
        """Read one object into ``dst``; each chunk is copied in only while the task is
        unreported (``_TaskClosed`` once it was, and ``dst`` is not touched again)."""
        location, name = self.location_of(key)
        try:
            response = self._client.get_object(Bucket=location.bucket, Key=name)
        except Exception as exc:
            if is_not_found(exc):
                self._health.success()
                return False
            raise
        body = response["Body"]
        unregister = gate.on_expire(_body_aborter(body))
        try:
            want = int(dst.get_size())
            if int(response.get("ContentLength", -1)) != want:
                self._count(size_mismatches=1)
                self._health.success()
                return False
            view = memoryview(dst.byte_array).cast("B")
            offset = 0
            for chunk in body.iter_chunks(_READ_CHUNK):
                end = offset + len(chunk)
                if end > want:
                    self._count(size_mismatches=1)
                    return False
                copied, _ = gate.while_open(
                    lambda offset=offset, end=end, chunk=chunk: view.__setitem__(
                        slice(offset, end), chunk))
                if not copied:
                    raise _TaskClosed
                offset = end
            if offset != want:
                self._count(size_mismatches=1)
                return False
        finally:
            unregister()
            body.close()
        self._health.success()
        return True

    # -- sizes, delete, listing -----------------------------------------------------------------

    def reports_object_sizes(self) -> bool:
        return True

    def routes_tenants(self) -> bool:
        """Whether ``tenant_routes`` places some tenants apart (the serde wrapper then refuses
        ``hide_names``, whose hidden keys name no tenant: lmserde.l2.contract.tenant_routing)."""
        return bool(self._settings.tenant_routes)

    def _parallel(self, n: int, job: Callable[[int], Any]) -> list[Any]:
        """``[job(i) for i in range(n)]`` on the I/O threads, waiting at most ``task_deadline_s``:
        a job not done by then gives ``None``."""
        futures: list[Future[Any]] = self._io.submit_all([lambda i=i: job(i) for i in range(n)])
        late = self._io.wait_bounded(futures)
        if late:
            _log.warning("s3 adapter: %d request(s) of a synchronous call passed the %.3g s "
                         "deadline", len(late), self._io.deadline_s)
        return [None if f in late else f.result() for f in futures]

    def get_object_sizes(self, keys: Sequence[ObjectKey]) -> dict[ObjectKey, int]:
        """Stored sizes (``HeadObject``) of the keys that exist and answered within
        ``task_deadline_s`` (the call never waits longer)."""
        keys = list(keys)
        heads = self._parallel(len(keys), lambda i: self._head_key(keys[i], "get_object_sizes"))
        return {k: int(h["ContentLength"]) for k, h in zip(keys, heads) if h is not None}

    def delete(self, keys: Sequence[ObjectKey]) -> None:
        """Delete keys now (waits, at most about twice ``task_deadline_s``: the lookup, then the
        delete); keys pinned by a lookup of this adapter go at their last unlock. Failures are
        logged and leave the objects in place.

        S3 deletes are idempotent and do not say whether an object existed, so the keys are
        looked up first (one HEAD each): listeners and usage hear only of objects that were
        there. Deletes are rare (repair, eviction); the round trip buys exact accounting.
        """
        present = self.get_object_sizes(keys)
        with self._state_lock:
            now = self._pins.defer_pinned(k for k in keys if k in present)
        if now:
            self._parallel(1, lambda _: self._delete_now(now))

    def _delete_now(self, keys: list[ObjectKey]) -> None:
        by_location: dict[S3Location, list[tuple[ObjectKey, str]]] = {}
        for key in keys:
            try:
                location, name = self.location_of(key)
            except ValueError:
                continue  # never stored
            by_location.setdefault(location, []).append((key, name))
        deleted: list[ObjectKey] = []
        for location, items in by_location.items():
            for start in range(0, len(items), _DELETE_BATCH):
                batch = items[start:start + _DELETE_BATCH]
                try:
                    response = self._client.delete_objects(
                        Bucket=location.bucket,
                        Delete={"Objects": [{"Key": n} for _, n in batch], "Quiet": True})
                except Exception as exc:
                    self._health.failure("delete", exc)
                    continue
                self._health.success()
                errors = {e.get("Key") for e in response.get("Errors", [])}
                if errors:
                    _log.warning("s3 adapter: %d object(s) were not deleted from %s",
                                 len(errors), location)
                deleted += [k for k, n in batch if n not in errors]
        if deleted:
            self._notify_keys_deleted(deleted)

    def list_l2_keys(self, model_name: str | None = None, *args: Any, **kwargs: Any
                     ) -> list[ObjectKey]:
        """Every key stored under this adapter's locations (optionally of one model).

        Objects whose names are not object-key names, and objects of a tenant whose salt cannot
        be recovered (no readable ``lmserde-salt`` metadata), are skipped. Waits for the service;
        errors propagate.
        """
        found: list[ObjectKey] = []
        seen: set[ObjectKey] = set()
        paginator = self._client.get_paginator("list_objects_v2")
        for location in self._settings.locations():
            namer = ObjectNamer(location.prefix)
            for page in paginator.paginate(Bucket=location.bucket, Prefix=location.prefix):
                for item in page.get("Contents", []):
                    key = self._key_of_listed(location, namer, str(item["Key"]))
                    if key is None or key in seen:
                        continue
                    if model_name is not None and key.model_name != model_name:
                        continue
                    seen.add(key)
                    found.append(key)
        return found

    def _key_of_listed(self, location: S3Location, namer: ObjectNamer, name: str
                       ) -> ObjectKey | None:
        try:
            parsed = namer.parse(name)
        except ValueError:
            return None
        salt = "" if parsed.tenant == "shared" else self._salt_of(location, name, parsed.tenant)
        if salt is None:
            return None
        key = parsed.key(salt)
        return key if self._settings.location_for(salt) == location else None

    def _salt_of(self, location: S3Location, name: str, tag: str) -> str | None:
        salt = self._salts.get(tag)
        if salt is not None:
            return salt
        try:
            head = self._head(location, name)
            value = (head or {}).get("Metadata", {}).get(SALT_METADATA)
            salt = decode_salt_metadata(value) if isinstance(value, str) else None
        except Exception as exc:
            _log.debug("s3 adapter: cannot read the salt of %s: %s", name, exc)
            return None
        if salt is None or salt_tag(salt) != tag:
            return None
        self._salts[tag] = salt
        return salt

    # -- status and lifecycle -------------------------------------------------------------------

    def credential_source(self) -> str | None:
        """How the provider chain found credentials (``env``, ``shared-credentials-file``,
        ``iam-role``, ...), ``None`` when it found none; never the credentials themselves."""
        if self._session is None:
            return None
        try:
            credentials = self._session.get_credentials()
        except Exception:
            return None
        return None if credentials is None else str(getattr(credentials, "method", "unknown"))

    def report_status(self) -> dict[str, Any]:
        status = super().report_status()
        with self._state_lock:
            status.update(self._counts)
            locked = self._pins.pinned_count
        closed = self._io.closed
        status.update(self._settings.describe())
        status.update(is_healthy=self._health.healthy and not closed, locked_keys=locked,
                      replacing_stores=self._replacing, io_jobs_running=self._io.running,
                      credential_source=self.credential_source(), health=self._health.snapshot())
        return status

    def __repr__(self) -> str:
        return (f"S3L2Adapter(bucket={self._settings.bucket!r}, prefix={self._settings.prefix!r}, "
                f"endpoint_url={self._settings.endpoint_url!r})")

    def replace_existing_on_store(self) -> bool:
        """Replacing stores (see :mod:`lmserde.l2.contract.replacing_store`): from now on a store
        is a plain ``PutObject``, which replaces an existing object atomically."""
        self._replacing = True
        return True

    def close(self) -> None:
        """Let running requests finish (waiting at most ``task_deadline_s``), drop queued ones,
        close the client's connections, join the I/O threads (unless one is still in a socket
        call a second later: it is logged and left) and close the fds; idempotent. Tasks not
        reported by then are never reported."""
        if self._io.close(self._client.close):
            self._queues.close()
