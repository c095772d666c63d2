"""``fs``: one file per key under a directory, written atomically, read back by exact length.

This module is over 400 lines because it is one adapter's whole contract (store, lookup, load,
sizes, delete, listing, status) over one directory; its file names and its sweep of stale
temporary files live in ``fs_names.py`` and ``fs_temp_files.py``."""

from __future__ import annotations

import itertools
import logging
import math
import os
import stat
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from lmserde.builtin_plugins import BUILTIN_FACTS
from lmserde.install_hints import L2_ADAPTER_GROUP
from lmserde.keys import ObjectKey
from lmserde.l2.adapters.fs_entries import FSEntryLayout, scrub_fs_entries
from lmserde.l2.adapters.fs_io import (
    EntryKind,
    clear_foreign_entry,
    entry_kind,
    open_object_file,
    read_exact,
    write_all,
    write_head_last,
)
from lmserde.l2.adapters.fs_names import (
    DATA_SUFFIX,
    MAX_READABLE_NAME,
    SIDECAR_SUFFIX,
    is_hashed_name,
    key_file_name,
    lmcache_file_name,
    parse_lmcache_name,
    parse_readable_name,
    readable_name,
    sidecar_name,
)
from lmserde.l2.adapters.fs_temp_files import TempSweep, pid_domain, sweep_stale_temp_files, temp_file_prefix
from lmserde.l2.contract.bitmap import Bitmap
from lmserde.l2.contract.entry_scrub import EntryScrub
from lmserde.l2.contract.head_last import DeferredHead
from lmserde.l2.contract.interface import L2AdapterInterface, L2TaskId, check_keys_and_objects
from lmserde.l2.contract.store_result import L2StoreResult
from lmserde.l2.contract.task_queues import AdapterTaskQueues, QueuedResults
from lmserde.l2.discovery.spec import L2AdapterSpec
from lmserde.layout import MemoryLayoutDesc
from lmserde.memory import MemoryObj
from lmserde.options import SerdeOption

__all__ = ["FSL2Adapter", "FS_ADAPTER_SPEC", "FSObjectScan", "key_file_name", "MAX_READABLE_NAME",
           "DEFAULT_STALE_TMP_SECONDS", "MIN_STALE_TMP_SECONDS", "MAX_STALE_TMP_SECONDS"]

_log = logging.getLogger(__name__)

#: File-name schemes of the ``naming`` option.
FILE_NAMINGS = ("lmserde", "lmcache")

_PATH_CACHE_LIMIT = 1 << 16
#: Default age (seconds since last modification) after which any writer's temporary is stale.
DEFAULT_STALE_TMP_SECONDS = 3600.0
#: Bounds of ``stale_tmp_seconds``: shorter would remove files of writers stalled by a slow
#: (network) file system; longer would keep dead writers' files for more than a month.
MIN_STALE_TMP_SECONDS = 60.0
MAX_STALE_TMP_SECONDS = 30 * 86400.0
_MAX_SIDECAR_BYTES = 1 << 20


def _check_stale_tmp_seconds(value: float) -> None:
    if not (math.isfinite(value) and MIN_STALE_TMP_SECONDS <= value <= MAX_STALE_TMP_SECONDS):
        raise ValueError(
            f"fs adapter stale_tmp_seconds must be a finite number of seconds in "
            f"[{MIN_STALE_TMP_SECONDS:g}, {MAX_STALE_TMP_SECONDS:g}], got {value!r}"
        )


@dataclass(frozen=True)
class FSObjectScan:
    """One pass over ``base_path``: the stored keys and what could not be listed.

    ``total_bytes`` sums the listed files' lengths. ``skipped_names`` counts entries that are no
    key file (foreign or hand-edited names, links, directories other than the temporary one);
    ``hashed_without_sidecar`` counts hashed data files whose readable name is missing or does not
    match (written before sidecars existed, or damaged): they load, but cannot be listed.
    """

    keys: list[ObjectKey]
    total_bytes: int
    skipped_names: int
    hashed_without_sidecar: int

    def as_dict(self) -> dict[str, int]:
        """Counts only: ``objects``, ``bytes``, ``skipped_names``, ``hashed_without_sidecar``."""
        return {"objects": len(self.keys), "bytes": self.total_bytes,
                "skipped_names": self.skipped_names,
                "hashed_without_sidecar": self.hashed_without_sidecar}


class FSL2Adapter(QueuedResults, L2AdapterInterface):
    """Stores each key as one file under ``base_path``.

    * Store writes the object's ``get_size()`` bytes to a temporary file in ``relative_tmp_dir``,
      optionally fsyncs it, and links it into place; a key whose file exists is skipped.
      Concurrent stores of one key never tear a file and count the key once. Through
      :meth:`submit_store_task_head_last` (unless ``head_last`` is false) the body is written
      first and the head last, after the serde wrapper computed it (:mod:`lmserde.l2.contract.head_last`).
    * Load is a hit only when the file length equals the destination's ``get_size()`` (the
      actual-used-length contract upper-bound serdes rely on); a 0-byte file into a 0-byte
      destination is a hit.
    * Only regular files are objects: symlinks are never followed and FIFOs never waited on.
      Anything else at a key's path (a symlink, FIFO, socket, device, an empty directory) is a
      miss and is replaced by the next store of the key (``foreign_entries_replaced``); a
      directory that holds anything fails stores of that key with an ``IsADirectoryError``
      naming it (the adapter never removes what a directory holds; ``lmserde scrub`` reports
      it).
    * After :meth:`replace_existing_on_store` (see :mod:`lmserde.l2.contract.replacing_store`)
      a store of a key whose file exists replaces it: the finished temporary file is renamed
      over it (``os.replace``, atomic), in the plain and the head-last path alike
      (``files_replaced``); concurrent stores of one key leave one complete file.
    * ``get_object_sizes`` reports file lengths, leaving out keys it cannot examine. Lookups
      check that a regular file exists; locks are no-ops (no eviction). Stores and loads run
      on ``io_workers`` threads; lookups complete inside submit.
    * Opening removes temporary files of dead writers (see :mod:`lmserde.l2.adapters.fs_temp_files`:
      writers of this host whose pid is gone, any writer's file unmodified for
      ``stale_tmp_seconds``); ``report_status`` counts what the sweep did (``tmp_removed``,
      ``tmp_kept_live``, ``tmp_kept_young``, ``tmp_sweep_errors``).
    * With ``create`` false, ``base_path`` must be an existing directory
      (``FileNotFoundError`` / ``NotADirectoryError`` otherwise) and opening changes nothing:
      no directory is created and no temporary file removed (``lmserde scrub`` opens so;
      stores fail while the temporary directory is missing).
    * :meth:`scrub_entries` finds the entries that are no readable object (see
      :mod:`lmserde.l2.adapters.fs_entries`) and removes them on request.
    * :meth:`list_l2_keys` lists stored keys from the file names. A key whose name is hashed
      (:func:`~lmserde.l2.adapters.fs_names.key_file_name`) gets a sidecar ``h-<digest>.key`` holding its
      readable name, published before the data file and removed by :meth:`delete`.

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
        stale_tmp_seconds: float = DEFAULT_STALE_TMP_SECONDS,
        naming: str = "lmserde",
        head_last: bool = True,
        create: bool = True,
    ) -> None:
        super().__init__(0)
        self._head_last = bool(head_last)
        if naming not in FILE_NAMINGS:
            raise ValueError(f"fs adapter naming must be one of {', '.join(FILE_NAMINGS)}, "
                             f"got {naming!r}")
        self._naming = naming
        self._file_name = key_file_name if naming == "lmserde" else lmcache_file_name
        self._parse_name = parse_readable_name if naming == "lmserde" else parse_lmcache_name
        if io_workers < 1:
            raise ValueError(f"fs adapter io_workers must be >= 1, got {io_workers}")
        _check_stale_tmp_seconds(stale_tmp_seconds)
        tmp = os.path.normpath(relative_tmp_dir)
        if os.path.isabs(tmp) or tmp == "." or tmp.split(os.sep)[0] == "..":
            raise ValueError(
                f"fs adapter relative_tmp_dir must be a sub-directory of base_path, got "
                f"{relative_tmp_dir!r}"
            )
        self._base = os.path.abspath(os.fspath(base_path))
        self._tmp_dir = os.path.join(self._base, tmp)
        self._tmp_top = tmp.split(os.sep)[0]
        if create:
            os.makedirs(self._tmp_dir, exist_ok=True)
        elif not os.path.isdir(self._base):
            raise (NotADirectoryError if os.path.lexists(self._base) else FileNotFoundError)(
                f"fs adapter base_path {self._base} is not an existing directory (create is "
                "false: nothing is created)")
        self._stale_tmp_seconds = float(stale_tmp_seconds)
        self._domain = pid_domain()
        # unique across hosts and processes sharing the directory: pid domain, pid, random bytes,
        # then a counter (the prefix is renewed when the pid changes, i.e. after a fork)
        self._tmp_pid = os.getpid()
        self._tmp_prefix = os.path.join(self._tmp_dir, temp_file_prefix(self._domain))
        self._tmp_counter = itertools.count()
        self._sweep = (sweep_stale_temp_files(self._tmp_dir, domain=self._domain,
                                              stale_seconds=self._stale_tmp_seconds)
                       if create else TempSweep())
        if self._sweep.removed:
            _log.info("fs adapter %s: removed %d temporary file(s) of dead or stalled writers "
                      "(kept %d of live writers, %d younger than %g s)", self._base,
                      self._sweep.removed, self._sweep.kept_live, self._sweep.kept_young,
                      self._stale_tmp_seconds)
        self._last_scan: dict[str, int] | None = None
        self._paths: dict[ObjectKey, str] = {}
        self._fsync = bool(fsync)
        self._replace = False
        self._queues = AdapterTaskQueues()
        self._pool = ThreadPoolExecutor(max_workers=io_workers, thread_name_prefix="lmserde-fs")
        self._state_lock = threading.Lock()
        self._closed = False
        self._counts_lock = threading.Lock()
        self._counts = {"files_written": 0, "stores_skipped": 0, "store_errors": 0,
                        "load_hits": 0, "load_misses": 0, "size_mismatches": 0,
                        "list_skipped_names": 0, "foreign_entries_replaced": 0,
                        "files_replaced": 0}

    @property
    def base_path(self) -> str:
        return self._base

    @property
    def naming(self) -> str:
        """``lmserde`` (escaped, always storable) or ``lmcache`` (LMCache 0.5.6's file names)."""
        return self._naming

    @property
    def tmp_dir(self) -> str:
        """Absolute path of the directory of files being written."""
        return self._tmp_dir

    @property
    def tmp_sweep(self) -> TempSweep:
        """What the sweep of stale temporary files did when this adapter opened."""
        return self._sweep

    def path_of(self, key: ObjectKey) -> str:
        """Absolute path of ``key``'s file."""
        path = self._paths.get(key)
        if path is None:
            if len(self._paths) >= _PATH_CACHE_LIMIT:
                self._paths.clear()
            path = self._paths[key] = self._base + os.sep + self._file_name(key)
        return path

    # -- task plumbing ----------------------------------------------------------------------------

    def _submit(self, fn: Callable[..., Any], *args: Any) -> None:
        with self._state_lock:
            if self._closed:
                raise RuntimeError(f"FSL2Adapter({self._base}) is closed")
            self._pool.submit(fn, *args)

    def _count(self, name: str, n: int = 1) -> None:
        with self._counts_lock:
            self._counts[name] += n

    # -- store ----------------------------------------------------------------------------------

    def replace_existing_on_store(self) -> bool:
        """Switch to replacing stores (see :mod:`lmserde.l2.contract.replacing_store`): from now
        on a store of a key whose file exists renames its finished temporary over that file
        instead of skipping the key. Always ``True``; idempotent."""
        self._replace = True
        return True

    @property
    def replaces_existing(self) -> bool:
        """Whether stores replace existing files (:meth:`replace_existing_on_store` was called)."""
        return self._replace

    def submit_store_task(
        self, keys: Sequence[ObjectKey], objects: Sequence[MemoryObj]
    ) -> L2TaskId:
        check_keys_and_objects(keys, objects, "submit_store_task")
        task_id = self._queues.new_task_id()
        self._submit(self._run_store, task_id, list(keys), list(objects), None)
        return task_id

    def writes_head_last(self) -> bool:
        """Whether stores may write a file's head after its body (the ``head_last`` option)."""
        return self._head_last

    def submit_store_task_head_last(self, keys: Sequence[ObjectKey], objects: Sequence[MemoryObj],
                                    heads: Sequence[DeferredHead]) -> L2TaskId:
        """:meth:`submit_store_task`, each temporary file written body first, then its head
        (after ``finish_head()``), then linked to its name (see
        :mod:`lmserde.l2.contract.head_last`)."""
        if not len(keys) == len(objects) == len(heads):
            raise ValueError(f"submit_store_task_head_last got {len(keys)} keys, "
                             f"{len(objects)} objects and {len(heads)} heads")
        task_id = self._queues.new_task_id()
        self._submit(self._run_store, task_id, list(keys), list(objects), list(heads))
        return task_id

    def _run_store(self, task_id: int, keys: list[ObjectKey], objects: list[MemoryObj],
                   heads: list[DeferredHead] | None) -> None:
        ok, written = True, 0
        stored_keys: list[ObjectKey] = []
        stored_sizes: list[int] = []
        for i, (key, obj) in enumerate(zip(keys, objects)):
            try:
                size = self._store_one(key, obj, None if heads is None else heads[i])
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

    def _store_one(self, key: ObjectKey, obj: MemoryObj, head: DeferredHead | None) -> int | None:
        """Write one file; returns its size, or ``None`` when the key was already stored."""
        path = self.path_of(key)
        hashed = is_hashed_name(os.path.basename(path))
        kind = clear_foreign_entry(path)
        if kind is EntryKind.FILE and not self._replace:
            if hashed:  # a file stored before sidecars existed becomes listable
                self._ensure_sidecar(key, path)
            self._count("stores_skipped")
            return None
        if kind is EntryKind.DIRECTORY:
            _remove_empty_directory(path)
        if kind in (EntryKind.OTHER, EntryKind.DIRECTORY):  # removed, replaced now
            self._count("foreign_entries_replaced")
        if hashed:
            self._ensure_sidecar(key, path)
        view = memoryview(obj.byte_array).cast("B")
        if not self._publish(view, path, head, replace=self._replace):
            self._count("stores_skipped")
            return None
        if hashed:  # a concurrent delete may have removed the sidecar meanwhile
            self._ensure_sidecar(key, path)
        self._count("files_replaced" if kind is EntryKind.FILE else "files_written")
        return len(view)

    def _new_tmp_path(self) -> str:
        pid = os.getpid()
        if pid != self._tmp_pid:  # forked: names must carry the writing process's pid
            self._tmp_pid = pid
            self._tmp_prefix = os.path.join(self._tmp_dir, temp_file_prefix(self._domain))
        return f"{self._tmp_prefix}{next(self._tmp_counter)}.tmp"

    def _publish(self, view: memoryview, path: str, head: DeferredHead | None = None, *,
                 replace: bool = False) -> bool:
        """Write ``view`` to a temporary (head last when ``head`` is given) and link it to
        ``path``; ``False`` when ``path`` exists. With ``replace`` the temporary is renamed over
        whatever file ``path`` holds (atomic; a directory there raises ``IsADirectoryError``)."""
        tmp = self._new_tmp_path()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            try:
                if head is None:
                    write_all(fd, view)
                else:
                    write_head_last(fd, view, head)
                if self._fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            if replace:
                os.replace(tmp, path)  # atomic: readers see the old file or the new one
            else:
                try:
                    os.link(tmp, path)  # atomic "create if absent", also across processes
                except FileExistsError:
                    return False
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
        return True

    def _ensure_sidecar(self, key: ObjectKey, path: str) -> None:
        """Publish the readable name of hashed ``path`` next to it, unless already there.

        A sidecar that is missing, not a regular file, or names another key is replaced (its
        content follows from the data file's name, so concurrent writers write the same bytes
        and a rename over it is safe); an empty directory there is removed."""
        if self._read_sidecar(os.path.basename(path)) == key:
            return
        side = path[: -len(DATA_SUFFIX)] + SIDECAR_SUFFIX
        if clear_foreign_entry(side) is EntryKind.DIRECTORY:
            _remove_empty_directory(side)
        self._publish(memoryview(readable_name(key).encode("ascii")), side, replace=True)

    # -- lookup / unlock ------------------------------------------------------------------------

    def submit_lookup_and_lock_task(
        self,
        keys: Sequence[ObjectKey],
        group_layout_descs: dict[int, MemoryLayoutDesc] | None = None,
    ) -> L2TaskId:
        if self._closed:
            raise RuntimeError(f"FSL2Adapter({self._base}) is closed")
        task_id = self._queues.new_task_id()
        bitmap = Bitmap.from_bools(entry_kind(self.path_of(k)) is EntryKind.FILE for k in keys)
        self._queues.lookup.complete(task_id, bitmap)
        return task_id

    def submit_unlock(self, keys: Sequence[ObjectKey]) -> None:
        """No-op: files are never evicted, so lookups take no locks."""

    # -- load -----------------------------------------------------------------------------------

    def submit_load_task(
        self, keys: Sequence[ObjectKey], objects: Sequence[MemoryObj]
    ) -> L2TaskId:
        check_keys_and_objects(keys, objects, "submit_load_task")
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
        opened = open_object_file(self.path_of(key))
        if opened is None:  # absent, or not a regular file (the next store replaces that)
            return False
        fd, size = opened
        try:
            want = dst.get_size()
            if size != want:
                self._count("size_mismatches")
                return False
            if want == 0:
                return True
            return read_exact(fd, memoryview(dst.byte_array).cast("B")) == want
        finally:
            os.close(fd)

    # -- extras ---------------------------------------------------------------------------------

    def reports_object_sizes(self) -> bool:
        return True

    def object_sizes_are_local(self) -> bool:
        return True

    def get_object_sizes(self, keys: Sequence[ObjectKey]) -> dict[ObjectKey, int]:
        """Sizes of the keys stored as regular files; a key that is absent, is something else
        or cannot be examined is left out (one bad entry never hides the others)."""
        sizes: dict[ObjectKey, int] = {}
        for key in keys:
            try:
                info = os.lstat(self.path_of(key))
            except FileNotFoundError:
                continue
            except OSError as exc:
                _log.warning("fs adapter: cannot examine %s: %s", key_file_name(key), exc)
                continue
            if stat.S_ISREG(info.st_mode):
                sizes[key] = info.st_size
        return sizes

    def delete(self, keys: Sequence[ObjectKey]) -> None:
        """Remove each key's file (and the sidecar of a hashed name); missing keys are skipped."""
        deleted: list[ObjectKey] = []
        for key in keys:
            path = self.path_of(key)
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            else:
                deleted.append(key)
            if is_hashed_name(os.path.basename(path)):
                try:
                    os.unlink(path[: -len(DATA_SUFFIX)] + SIDECAR_SUFFIX)
                except FileNotFoundError:
                    pass
        if deleted:
            self._notify_keys_deleted(deleted)

    # -- listing --------------------------------------------------------------------------------

    def list_l2_keys(self, model_name: str | None = None, *args: Any, **kwargs: Any
                     ) -> list[ObjectKey]:
        """Every stored key (optionally of one model), in no particular order.

        Keys are read back from file names; names that are no key file are skipped and counted
        (``list_skipped_names`` in :meth:`report_status`), never raised. A hashed name is listed
        through its sidecar (see :class:`FSObjectScan` for the ones that cannot be).
        """
        return self.scan_objects(model_name).keys

    def scan_objects(self, model_name: str | None = None) -> FSObjectScan:
        """List ``base_path`` once: keys (optionally of one model), their bytes, what was skipped.

        The counts are kept for :meth:`report_status` (``last_scan``).
        """
        keys: list[ObjectKey] = []
        total = skipped = unlisted = 0
        with os.scandir(self._base) as entries:
            for entry in entries:
                name = entry.name
                try:
                    if entry.is_dir(follow_symlinks=False) and name == self._tmp_top:
                        continue
                    if name.endswith(SIDECAR_SUFFIX) and is_hashed_name(
                            name[: -len(SIDECAR_SUFFIX)] + DATA_SUFFIX):
                        continue  # listed with its data file
                    if not entry.is_file(follow_symlinks=False):
                        skipped += 1
                        continue
                    if is_hashed_name(name):
                        key = self._read_sidecar(name)
                        if key is None:
                            unlisted += 1
                            continue
                    else:
                        key = self._parse_name(name)
                        if key is None:
                            skipped += 1
                            continue
                    if model_name is not None and key.model_name != model_name:
                        continue
                    total += entry.stat(follow_symlinks=False).st_size
                except FileNotFoundError:  # deleted while listing
                    continue
                keys.append(key)
        self._count("list_skipped_names", skipped)
        scan = FSObjectScan(keys, total, skipped, unlisted)
        with self._counts_lock:
            self._last_scan = scan.as_dict()
        return scan

    def _read_sidecar(self, hashed: str) -> ObjectKey | None:
        """The key of hashed data file ``hashed`` from its sidecar; ``None`` if absent or wrong."""
        try:
            opened = open_object_file(os.path.join(self._base, sidecar_name(hashed)))
        except OSError:
            return None
        if opened is None:
            return None
        fd = opened[0]
        try:
            data = os.read(fd, _MAX_SIDECAR_BYTES + 1)
        except OSError:
            return None
        finally:
            os.close(fd)
        if len(data) > _MAX_SIDECAR_BYTES or not data.isascii():
            return None
        key = parse_readable_name(data.decode("ascii"))
        return key if key is not None and key_file_name(key) == hashed else None

    def scrub_entries(self, *, delete: bool = False) -> EntryScrub:
        """Every entry of ``base_path`` that is no readable object, by reason; removed with
        ``delete`` (see :mod:`lmserde.l2.adapters.fs_entries` for the reasons and what is never
        removed). ``OSError`` when ``base_path`` cannot be listed."""
        layout = FSEntryLayout(
            base=self._base, tmp_dir=self._tmp_dir, tmp_top=self._tmp_top,
            parse_name=self._parse_name, hashed_names=self._naming == "lmserde",
            read_sidecar=self._read_sidecar, domain=self._domain,
            stale_seconds=self._stale_tmp_seconds)
        return scrub_fs_entries(layout, delete=delete)

    def report_status(self) -> dict[str, Any]:
        status = super().report_status()
        with self._counts_lock:
            status.update(self._counts)
            status["last_scan"] = None if self._last_scan is None else dict(self._last_scan)
        sweep = self._sweep
        status.update(base_path=self._base, fsync=self._fsync, is_healthy=not self._closed,
                      stale_tmp_seconds=self._stale_tmp_seconds, tmp_removed=sweep.removed,
                      tmp_kept_live=sweep.kept_live, tmp_kept_young=sweep.kept_young,
                      tmp_sweep_errors=sweep.errors)
        return status

    def close(self) -> None:
        """Wait for running file operations, drop queued ones, close the fds; idempotent."""
        with self._state_lock:
            if self._closed:
                return
            self._closed = True
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._queues.close()


def _remove_empty_directory(path: str) -> None:
    """Remove the directory at ``path`` if it is empty (an empty directory holds no data, and
    ``rmdir`` refuses atomically otherwise); ``IsADirectoryError`` naming it when it holds
    anything: what a directory holds may be someone's data and is never removed."""
    try:
        os.rmdir(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise IsADirectoryError(
            f"a directory that is not empty stands where an object file belongs: {path} "
            f"({exc.strerror}); the adapter never removes what it holds: move it away "
            "(lmserde scrub reports such entries)") from exc


def _create_fs(options: dict[str, Any], l1_manager: Any) -> FSL2Adapter:
    return FSL2Adapter(options["base_path"], relative_tmp_dir=options["relative_tmp_dir"],
                       fsync=options["fsync"], io_workers=options["io_workers"],
                       stale_tmp_seconds=options["stale_tmp_seconds"], naming=options["naming"],
                       head_last=options["head_last"], create=options["create"])


def _check_base_path(value: str) -> None:
    if not value.strip():
        raise ValueError("option 'base_path' must name a directory, got an empty string")


FS_ADAPTER_SPEC = L2AdapterSpec(
    factory=_create_fs,
    description=BUILTIN_FACTS[L2_ADAPTER_GROUP]["fs"].description,
    options=(
        SerdeOption("base_path", str, None, "directory holding one file per key", required=True,
                    check=_check_base_path),
        SerdeOption("relative_tmp_dir", str, ".tmp",
                    "sub-directory of base_path for files being written"),
        SerdeOption("fsync", bool, False, "fsync each file and the directory after writing"),
        SerdeOption("io_workers", int, 2, "threads doing file I/O", minimum=1, maximum=256),
        SerdeOption("naming", str, "lmserde",
                    "file names: lmserde (escaped, any key) or lmcache (LMCache 0.5.6's names, for "
                    "a directory LMCache processes share; use with serde_frame false)",
                    choices=FILE_NAMINGS),
        SerdeOption("head_last", bool, True,
                    "let the serde wrapper checksum a framed object while its file is written, "
                    "its header written last at offset 0; false for file systems that only take "
                    "sequential writes"),
        SerdeOption("create", bool, True,
                    "create base_path and its temporary directory when missing, and remove dead "
                    "writers' temporary files on open; false: base_path must exist and opening "
                    "changes nothing (lmserde scrub opens so)"),
        SerdeOption("stale_tmp_seconds", float, DEFAULT_STALE_TMP_SECONDS,
                    "on open, remove any writer's temporary file unmodified for this long "
                    f"(dead writers of this host: at once); {MIN_STALE_TMP_SECONDS:g} to "
                    f"{MAX_STALE_TMP_SECONDS:g}", check=_check_stale_tmp_seconds),
    ),
    reports_object_sizes=True,
)
