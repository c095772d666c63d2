"""``fs``: one file per key under a directory, written atomically, read back by exact length."""

from __future__ import annotations

import hashlib
import itertools
import logging
import os
import string
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from lmserde.keys import ObjectKey
from lmserde.l2.adapter_spec import L2AdapterSpec
from lmserde.l2.bitmap import Bitmap
from lmserde.l2.interface import L2AdapterInterface, L2TaskId
from lmserde.l2.store_result import L2StoreResult
from lmserde.l2.task_queues import AdapterTaskQueues
from lmserde.layout import MemoryLayoutDesc
from lmserde.memory import MemoryObj
from lmserde.options import SerdeOption

__all__ = ["FSL2Adapter", "FS_ADAPTER_SPEC", "key_file_name", "MAX_READABLE_NAME"]

_log = logging.getLogger(__name__)

_SAFE_CHARS = frozenset(string.ascii_letters + string.digits + "-_.")
#: Longest readable file name; longer names are replaced by a digest of the readable name.
MAX_READABLE_NAME = 200
_SUFFIX = ".data"
_PATH_CACHE_LIMIT = 1 << 16


def _escape(text: str) -> str:
    """Percent-encode every UTF-8 byte outside ``[A-Za-z0-9._-]`` (``@``, ``/``, ``%`` included).

    Lone surrogates (possible in a Python ``str``) are encoded like any other code point.
    """
    if all(ch in _SAFE_CHARS for ch in text):
        return text
    out = []
    for ch in text:
        if ch in _SAFE_CHARS:
            out.append(ch)
        else:
            out.extend(f"%{b:02X}" for b in ch.encode("utf-8", "surrogatepass"))
    return "".join(out)


def key_file_name(key: ObjectKey) -> str:
    """The file name of ``key``: injective, a single path component, at most 255 bytes.

    ``<model>@<kv_rank hex>@<object_group_id hex>@<chunk_hash hex>[@<cache_salt>].data`` with
    model and salt percent-encoded, so no key content can add a path separator, ``..`` or a NUL.
    Names longer than :data:`MAX_READABLE_NAME` become ``h-<blake2b-256 of that name>.data``.
    """
    parts = [_escape(key.model_name), f"{key.kv_rank:x}", f"{key.object_group_id:x}",
             key.chunk_hash.hex()]
    if key.cache_salt:
        parts.append(_escape(key.cache_salt))
    name = "@".join(parts) + _SUFFIX
    if len(name) <= MAX_READABLE_NAME:
        return name
    return "h-" + hashlib.blake2b(name.encode("ascii"), digest_size=32).hexdigest() + _SUFFIX


def _write_all(fd: int, view: memoryview) -> None:
    offset, total = 0, len(view)
    while offset < total:
        offset += os.write(fd, view[offset:])


def _read_exact(fd: int, view: memoryview) -> int:
    """Read up to ``len(view)`` bytes; returns how many were read (short at end of file)."""
    offset, total = 0, len(view)
    while offset < total:
        n = os.readv(fd, [view[offset:]])
        if n == 0:
            break
        offset += n
    return offset


class FSL2Adapter(L2AdapterInterface):
    """Stores each key as one file under ``base_path``.

    * Store writes the object's ``get_size()`` bytes to a temporary file in ``relative_tmp_dir``,
      optionally fsyncs it, and links it into place; a key whose file exists is skipped.
      Concurrent stores of one key never tear a file and count the key once.
    * Load is a hit only when the file length equals the destination's ``get_size()`` (the
      actual-used-length contract upper-bound serdes rely on); a 0-byte file into a 0-byte
      destination is a hit.
    * ``get_object_sizes`` reports file lengths. Lookups check existence; locks are no-ops (no
      eviction). Stores and loads run on ``io_workers`` threads; lookups complete inside submit.

    Usage accounting covers what this instance stored and deleted.
    """

    adapter_type = "fs"

    def __init__(
        self,
        base_path: str | os.PathLike[str],
        *,
        relative_tmp_dir: str = ".tmp",
        fsync: bool = False,
        io_workers: int = 2,
    ) -> None:
        super().__init__(0)
        if io_workers < 1:
            raise ValueError(f"fs adapter io_workers must be >= 1, got {io_workers}")
        tmp = os.path.normpath(relative_tmp_dir)
        if os.path.isabs(tmp) or tmp == "." or tmp.split(os.sep)[0] == "..":
            raise ValueError(
                f"fs adapter relative_tmp_dir must be a sub-directory of base_path, got "
                f"{relative_tmp_dir!r}"
            )
        self._base = os.path.abspath(os.fspath(base_path))
        self._tmp_dir = os.path.join(self._base, tmp)
        os.makedirs(self._tmp_dir, exist_ok=True)
        # unique across processes sharing the directory: pid plus random bytes, then a counter
        self._tmp_prefix = os.path.join(self._tmp_dir, f"{os.getpid()}-{os.urandom(6).hex()}-")
        self._tmp_counter = itertools.count()
        self._paths: dict[ObjectKey, str] = {}
        self._fsync = bool(fsync)
        self._queues = AdapterTaskQueues()
        self._pool = ThreadPoolExecutor(max_workers=io_workers, thread_name_prefix="lmserde-fs")
        self._state_lock = threading.Lock()
        self._closed = False
        self._counts_lock = threading.Lock()
        self._counts = {"files_written": 0, "stores_skipped": 0, "store_errors": 0,
                        "load_hits": 0, "load_misses": 0, "size_mismatches": 0}

    @property
    def base_path(self) -> str:
        return self._base

    def path_of(self, key: ObjectKey) -> str:
        """Absolute path of ``key``'s file."""
        path = self._paths.get(key)
        if path is None:
            if len(self._paths) >= _PATH_CACHE_LIMIT:
                self._paths.clear()
            path = self._paths[key] = self._base + os.sep + key_file_name(key)
        return path

    # -- fds ------------------------------------------------------------------------------------

    def get_store_event_fd(self) -> int:
        return self._queues.store.fileno()

    def get_lookup_and_lock_event_fd(self) -> int:
        return self._queues.lookup.fileno()

    def get_load_event_fd(self) -> int:
        return self._queues.load.fileno()

    def _submit(self, fn: Callable[..., Any], *args: Any) -> None:
        with self._state_lock:
            if self._closed:
                raise RuntimeError(f"FSL2Adapter({self._base}) is closed")
            self._pool.submit(fn, *args)

    def _count(self, name: str, n: int = 1) -> None:
        with self._counts_lock:
            self._counts[name] += n

    # -- store ----------------------------------------------------------------------------------

    def submit_store_task(
        self, keys: Sequence[ObjectKey], objects: Sequence[MemoryObj]
    ) -> L2TaskId:
        if len(keys) != len(objects):
            raise ValueError(f"submit_store_task got {len(keys)} keys but {len(objects)} objects")
        task_id = self._queues.new_task_id()
        self._submit(self._run_store, task_id, list(keys), list(objects))
        return task_id

    def _run_store(self, task_id: int, keys: list[ObjectKey], objects: list[MemoryObj]) -> None:
        ok, written = True, 0
        stored_keys: list[ObjectKey] = []
        stored_sizes: list[int] = []
        for key, obj in zip(keys, objects):
            try:
                size = self._store_one(key, obj)
            except Exception as exc:  # one failed file fails the task
                _log.warning("fs adapter: storing %s failed: %s: %s", key_file_name(key),
                             type(exc).__name__, exc)
                self._count("store_errors")
                ok = False
                continue
            if size is not None:
                written += size
                stored_keys.append(key)
                stored_sizes.append(size)
        if stored_keys:
            self._notify_keys_stored(stored_keys, stored_sizes)
        self._queues.store.complete(task_id, L2StoreResult(ok, written if ok else 0))

    def _store_one(self, key: ObjectKey, obj: MemoryObj) -> int | None:
        """Write one file; returns its size, or ``None`` when the key was already stored."""
        path = self.path_of(key)
        if os.path.exists(path):
            self._count("stores_skipped")
            return None
        view = memoryview(obj.byte_array).cast("B")
        tmp = f"{self._tmp_prefix}{next(self._tmp_counter)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            try:
                _write_all(fd, view)
                if self._fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            try:
                os.link(tmp, path)  # atomic "create if absent", also across processes
            except FileExistsError:
                self._count("stores_skipped")
                return None
            except OSError:  # no hard links here: fall back to an atomic replace
                os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        if self._fsync:
            dir_fd = os.open(self._base, os.O_RDONLY | os.O_CLOEXEC)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        self._count("files_written")
        return len(view)

    def pop_completed_store_tasks(self) -> dict[L2TaskId, L2StoreResult]:
        return self._queues.store.pop_all()

    # -- lookup / unlock ------------------------------------------------------------------------

    def submit_lookup_and_lock_task(
        self,
        keys: Sequence[ObjectKey],
        group_layout_descs: dict[int, MemoryLayoutDesc] | None = None,
    ) -> L2TaskId:
        if self._closed:
            raise RuntimeError(f"FSL2Adapter({self._base}) is closed")
        task_id = self._queues.new_task_id()
        bitmap = Bitmap.from_bools(os.path.exists(self.path_of(k)) for k in keys)
        self._queues.lookup.complete(task_id, bitmap)
        return task_id

    def query_lookup_and_lock_result(self, task_id: L2TaskId) -> Bitmap | None:
        return self._queues.lookup.pop(task_id)

    def submit_unlock(self, keys: Sequence[ObjectKey]) -> None:
        """No-op: files are never evicted, so lookups take no locks."""

    # -- load -----------------------------------------------------------------------------------

    def submit_load_task(
        self, keys: Sequence[ObjectKey], objects: Sequence[MemoryObj]
    ) -> L2TaskId:
        if len(keys) != len(objects):
            raise ValueError(f"submit_load_task got {len(keys)} keys but {len(objects)} objects")
        task_id = self._queues.new_task_id()
        self._submit(self._run_load, task_id, list(keys), list(objects))
        return task_id

    def _run_load(self, task_id: int, keys: list[ObjectKey], objects: list[MemoryObj]) -> None:
        bitmap = Bitmap(len(keys))
        accessed: list[ObjectKey] = []
        for i, (key, dst) in enumerate(zip(keys, objects)):
            try:
                hit = self._load_one(key, dst)
            except Exception as exc:  # an unreadable file is a miss
                _log.warning("fs adapter: loading %s failed: %s: %s", key_file_name(key),
                             type(exc).__name__, exc)
                hit = False
            if hit:
                bitmap.set(i)
                accessed.append(key)
        self._count("load_hits", len(accessed))
        self._count("load_misses", len(keys) - len(accessed))
        if accessed:
            self._notify_keys_accessed(accessed)
        self._queues.load.complete(task_id, bitmap)

    def _load_one(self, key: ObjectKey, dst: MemoryObj) -> bool:
        try:
            fd = os.open(self.path_of(key), os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return False
        try:
            want = dst.get_size()
            if os.fstat(fd).st_size != want:
                self._count("size_mismatches")
                return False
            if want == 0:
                return True
            return _read_exact(fd, memoryview(dst.byte_array).cast("B")) == want
        finally:
            os.close(fd)

    def query_load_result(self, task_id: L2TaskId) -> Bitmap | None:
        return self._queues.load.pop(task_id)

    # -- extras ---------------------------------------------------------------------------------

    def reports_object_sizes(self) -> bool:
        return True

    def get_object_sizes(self, keys: Sequence[ObjectKey]) -> dict[ObjectKey, int]:
        sizes: dict[ObjectKey, int] = {}
        for key in keys:
            try:
                sizes[key] = os.stat(self.path_of(key)).st_size
            except FileNotFoundError:
                continue
        return sizes

    def delete(self, keys: Sequence[ObjectKey]) -> None:
        deleted: list[ObjectKey] = []
        for key in keys:
            try:
                os.unlink(self.path_of(key))
            except FileNotFoundError:
                continue
            deleted.append(key)
        if deleted:
            self._notify_keys_deleted(deleted)

    def report_status(self) -> dict[str, Any]:
        status = super().report_status()
        with self._counts_lock:
            status.update(self._counts)
        status.update(base_path=self._base, fsync=self._fsync, is_healthy=not self._closed)
        return status

    def close(self) -> None:
        """Wait for running file operations, drop queued ones, close the fds; idempotent."""
        with self._state_lock:
            if self._closed:
                return
            self._closed = True
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._queues.close()


def _create_fs(options: dict[str, Any], l1_manager: Any) -> FSL2Adapter:
    return FSL2Adapter(options["base_path"], relative_tmp_dir=options["relative_tmp_dir"],
                       fsync=options["fsync"], io_workers=options["io_workers"])


def _check_base_path(value: str) -> None:
    if not value.strip():
        raise ValueError("option 'base_path' must name a directory, got an empty string")


FS_ADAPTER_SPEC = L2AdapterSpec(
    factory=_create_fs,
    description="One file per key under base_path (atomic writes, exact-length loads)",
    options=(
        SerdeOption("base_path", str, None, "directory holding one file per key", required=True,
                    check=_check_base_path),
        SerdeOption("relative_tmp_dir", str, ".tmp",
                    "sub-directory of base_path for files being written"),
        SerdeOption("fsync", bool, False, "fsync each file and the directory after writing"),
        SerdeOption("io_workers", int, 2, "threads doing file I/O", minimum=1),
    ),
    reports_object_sizes=True,
)
