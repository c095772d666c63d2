"""A keyring file that running processes re-read when it changes, off the data path.

``lmserde tenant forget`` and ``lmserde keys rotate/retire`` replace the keyring file atomically;
every process reading it through a :class:`KeyringWatch` picks the new contents up without a
restart, at most ``reload_interval_s`` (default :data:`DEFAULT_RELOAD_INTERVAL_S`) plus one file
read later:

* The data path only reads the last good keyring (one attribute read) and compares a clock with
  the next check time. When a check is due it starts a short-lived background thread and goes on
  with the keyring it has: a store or load never waits on the file system.
* The check compares the file's identity and stamp (device, inode, size, mtime, ctime; an
  atomic replace gives a new inode, a Kubernetes Secret update a new symlink target) with the
  last one read, and reads and parses the file only when it differs.
* A file that cannot be read or parsed (a half-copied file, wrong permissions) keeps the last
  good keyring in use; the error is logged once per distinct error and kept in
  :attr:`KeyringWatch.reload_error` until a read succeeds.
* :attr:`KeyringWatch.generation` grows by one each time the keyring's contents change, so users
  that cache keys derived from it (``aesgcm``'s cipher cache) drop them.
* A forked child starts with a fresh lock and no check in flight (``os.register_at_fork``): the
  parent's check thread does not exist in the child, and a lock that thread held at the fork
  would never be released there.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Iterable

from lmserde.tenant_keys.keyring import KEYRING_FORMAT_FIELD, Keyring, parse_keyring
from lmserde.tenant_keys.secret_file import read_secret_file

__all__ = ["DEFAULT_RELOAD_INTERVAL_S", "KeyringWatch"]

#: How often (seconds) a running process looks at its keyring file by default.
DEFAULT_RELOAD_INTERVAL_S = 5.0

_log = logging.getLogger("lmserde.tenant_keys")

_Stamp = tuple[int, int, int, int, int]

#: Every live watch of this process, reset in a forked child (:func:`_reset_in_child`).
_WATCHES: weakref.WeakSet[KeyringWatch] = weakref.WeakSet()


def _stamp(path: str) -> _Stamp:
    st = os.stat(path)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class KeyringWatch:
    """The keyring in ``path``, re-read when the file changes (see the module docstring).

    The constructor reads the file and raises ``KeyFileError``/``KeyringError`` if it is
    unusable (a bad keyring at start is a configuration error); later failures only keep the last
    good keyring. ``reload_interval_s`` 0 reads the file once and never again. ``formats`` are the
    keyring kinds accepted (see :func:`~lmserde.tenant_keys.parse_keyring`). Thread-safe.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        reload_interval_s: float = DEFAULT_RELOAD_INTERVAL_S,
        formats: Iterable[str] = (KEYRING_FORMAT_FIELD,),
        allow_insecure_permissions: bool = False,
    ) -> None:
        if not reload_interval_s >= 0:
            raise ValueError(f"reload_interval_s must be >= 0, got {reload_interval_s!r}")
        self._path = os.fspath(path)
        self._interval = float(reload_interval_s)
        self._formats = tuple(formats)
        self._insecure = allow_insecure_permissions
        self._lock = threading.Lock()
        self._check_lock = threading.Lock()  # one check_now at a time; never taken by current()
        self._checking = False
        self._generation = 0
        self._reload_error: str | None = None
        self._stamp: _Stamp | None = None
        self._keyring = self._read()
        self._next_check = time.monotonic() + self._interval
        _WATCHES.add(self)

    @property
    def path(self) -> str:
        """The keyring file watched."""
        return self._path

    @property
    def reload_interval_s(self) -> float:
        """Seconds between two looks at the file (0: never reloaded)."""
        return self._interval

    @property
    def generation(self) -> int:
        """How many times the keyring's contents changed since this watch read it first."""
        return self._generation

    @property
    def reload_error(self) -> str | None:
        """Why the last look at the file could not use it (``None`` once a read succeeded)."""
        return self._reload_error

    def current(self) -> Keyring:
        """The last good keyring; starts a background check when one is due (never waits)."""
        if self._interval and time.monotonic() >= self._next_check:
            self._start_check()
        return self._keyring

    def check_now(self) -> bool:
        """Look at the file now, on this thread; ``True`` when the keyring's contents changed.

        Never raises for an unusable file: the last good keyring stays (see
        :attr:`reload_error`). Checks run one at a time (the background one included): a check
        that read the file before another's newer read must not install the older keyring after
        it, and then take the file for unchanged.
        """
        with self._check_lock:
            return self._check()

    def _check(self) -> bool:
        try:
            stamp = _stamp(self._path)
            if stamp == self._stamp:
                self._reload_error = None
                return False
            keyring = self._read()
        except (OSError, ValueError) as exc:
            message = f"{type(exc).__name__}: {exc}"
            if message != self._reload_error:
                _log.warning("keyring %s could not be reloaded; the last good keyring stays in "
                             "use: %s", self._path, message)
            self._reload_error = message
            return False
        self._reload_error = None
        with self._lock:
            if keyring.dumps() == self._keyring.dumps():
                return False
            self._keyring = keyring
            self._generation += 1
        _log.info("keyring %s reloaded (%d tenants)", self._path, len(keyring.tenants))
        return True

    def _read(self) -> Keyring:
        stamp = _stamp(self._path)
        data = read_secret_file(self._path, what="keyring file",
                                allow_insecure_permissions=self._insecure)
        keyring = parse_keyring(data, source=self._path, formats=self._formats)
        self._stamp = stamp
        return keyring

    def _start_check(self) -> None:
        with self._lock:
            if self._checking or time.monotonic() < self._next_check:
                return
            self._checking = True
        try:
            threading.Thread(target=self._check_in_background, daemon=True,
                             name="lmserde-keyring-reload").start()
        except RuntimeError:  # interpreter shutting down: try again at the next due check
            self._done_checking()

    def _check_in_background(self) -> None:
        try:
            self.check_now()
        except BaseException:  # never let the check thread die silently with the flag set
            _log.exception("keyring %s: reload check failed", self._path)
        finally:
            self._done_checking()

    def _done_checking(self) -> None:
        with self._lock:
            self._checking = False
            self._next_check = time.monotonic() + self._interval


def _reset_in_child() -> None:
    """After a fork, in the child: every watch gets new locks and no check in flight (the
    parent's check thread, and whatever lock it held, are not in the child)."""
    for watch in list(_WATCHES):
        watch._lock = threading.Lock()
        watch._check_lock = threading.Lock()
        watch._checking = False


os.register_at_fork(after_in_child=_reset_in_child)
