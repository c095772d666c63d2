"""Temporary files of the ``fs`` adapter: their names, and removing those of dead writers.

A writer names its temporary files ``<domain>-<pid>-<random>-<n>.tmp``. ``<domain>`` (16 hex
digits) identifies the *pid domain* of the writer: the host name, the kernel boot id and the pid
namespace, hashed. Two writers share a domain only when their pids name processes of one pid
namespace of one running kernel, which is exactly when ``os.kill(pid, 0)`` in one tells whether
the other is alive. Several processes, containers or hosts (over NFS) may share a directory.

:func:`sweep_stale_temp_files` removes a temporary file when

* its writer is in this domain and its pid names no process (or a zombie), or
* whatever the domain, it was last modified more than ``stale_seconds`` ago (a live writer keeps
  modifying its file while it writes, so only a writer stalled that long can lose its file; the
  store then fails cleanly: linking a removed temporary fails and nothing is published).

Names of the older form ``<pid>-<random>-<n>.tmp`` carry no domain and are removed by age only.
A live writer of this domain never loses its file. Only regular files whose names have one of
these two forms, directly in the temporary directory, are ever removed; symbolic links are never
followed (a temporary directory that is itself a link is not swept).
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import re
import socket
import stat
import time
from dataclasses import dataclass

__all__ = ["TempSweep", "pid_domain", "sweep_stale_temp_files", "temp_file_prefix",
           "parse_temp_name", "TempName"]

_log = logging.getLogger(__name__)

_NEW_FORM = re.compile(r"([0-9a-f]{16})-([0-9]{1,19})-([0-9a-f]{12})-([0-9]{1,20})\.tmp")
_OLD_FORM = re.compile(r"([0-9]{1,19})-([0-9a-f]{12})-([0-9]{1,20})\.tmp")


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read(256).strip()
    except OSError:
        return ""


def pid_domain() -> str:
    """16 hex digits naming this process's pid domain (host name, boot id, pid namespace)."""
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = ""
    identity = "\0".join([socket.gethostname(), _read_text("/proc/sys/kernel/random/boot_id"),
                          namespace])
    return hashlib.blake2b(identity.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def temp_file_prefix(domain: str) -> str:
    """``<domain>-<pid>-<random>-``: the prefix of this process's temporary names (fresh random)."""
    return f"{domain}-{os.getpid()}-{os.urandom(6).hex()}-"


@dataclass(frozen=True)
class TempName:
    """A parsed temporary name; ``domain`` is ``None`` for the older pid-only form."""

    domain: str | None
    pid: int


def parse_temp_name(name: str) -> TempName | None:
    """The writer of a temporary file named ``name``, or ``None`` when it is no temporary name."""
    match = _NEW_FORM.fullmatch(name)
    if match:
        return TempName(match.group(1), int(match.group(2)))
    match = _OLD_FORM.fullmatch(name)
    if match:
        return TempName(None, int(match.group(1)))
    return None


def _pid_is_alive(pid: int) -> bool:
    """Whether ``pid`` (> 0) names a running (non-zombie) process of this pid namespace."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    except OverflowError:  # no such pid can exist
        return False
    stat_line = _read_text(f"/proc/{pid}/stat")
    # "<pid> (<comm>) <state> ...": comm may hold spaces and parentheses, the state follows the
    # last ')'; a zombie has exited (its parent has not reaped it yet)
    state = stat_line[stat_line.rfind(")") + 1:].split()[:1]
    return state != ["Z"]


@dataclass(frozen=True)
class TempSweep:
    """What one sweep did: files removed, temporaries kept (live writer / too young), and errors.

    ``removed_names`` names the files removed; ``stale_left`` the stale ones still there (all of
    them when the sweep only looked, ``remove=False``; else those whose removal failed)."""

    removed: int = 0
    kept_live: int = 0
    kept_young: int = 0
    errors: int = 0
    removed_names: tuple[str, ...] = ()
    stale_left: tuple[str, ...] = ()


def sweep_stale_temp_files(tmp_dir: str, *, domain: str, stale_seconds: float,
                           now: float | None = None, remove: bool = True) -> TempSweep:
    """Remove the temporary files of dead writers in ``tmp_dir`` (see the module docstring);
    with ``remove=False`` only find them (``stale_left``), changing nothing.

    Never raises for I/O problems: they are logged and counted in ``errors``.
    """
    now = time.time() if now is None else now
    removed = kept_live = kept_young = errors = 0
    removed_names: list[str] = []
    stale_left: list[str] = []
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
    try:
        dir_fd = os.open(tmp_dir, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP or exc.errno == errno.ENOTDIR:
            _log.warning("fs adapter: %s is a symbolic link; its temporary files are not swept",
                         tmp_dir)
        else:
            _log.warning("fs adapter: cannot open %s to sweep temporary files: %s", tmp_dir, exc)
        return TempSweep(errors=1)
    try:
        with os.scandir(dir_fd) as entries:
            names = [e.name for e in entries]
        for name in names:
            writer = parse_temp_name(name)
            if writer is None:
                continue
            stale = False
            try:
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                if not stat.S_ISREG(st.st_mode):
                    continue
                # pid 0 would address our process group in os.kill: such a name is judged by age
                mine = writer.domain == domain and writer.pid > 0
                if mine and _pid_is_alive(writer.pid):
                    kept_live += 1
                    continue
                if not mine and now - st.st_mtime <= stale_seconds:
                    kept_young += 1
                    continue
                stale = True
                if not remove:
                    stale_left.append(name)
                    continue
                os.unlink(name, dir_fd=dir_fd)
                removed += 1
                removed_names.append(name)
            except FileNotFoundError:  # finished (linked and unlinked) or swept by another opener
                continue
            except OSError as exc:
                errors += 1
                if stale:
                    stale_left.append(name)
                _log.warning("fs adapter: cannot remove stale temporary %s: %s",
                             os.path.join(tmp_dir, name), exc)
    except OSError as exc:
        errors += 1
        _log.warning("fs adapter: cannot list %s to sweep temporary files: %s", tmp_dir, exc)
    finally:
        os.close(dir_fd)
    return TempSweep(removed, kept_live, kept_young, errors, tuple(removed_names),
                     tuple(stale_left))
