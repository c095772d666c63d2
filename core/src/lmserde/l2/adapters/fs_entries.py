"""Entry scrub of the ``fs`` adapter: every entry of ``base_path`` that is no readable object.

Damage (reported under its reason; removed with ``delete``):

* ``symlink``, ``fifo``, ``socket``, ``device``: such an entry at a key's name (a readable name
  that parses, or a hashed name) — never an object; removed (``unlink``, the link itself).
* ``directory``: a directory at a key's name; removed when empty (``rmdir``, which refuses
  atomically otherwise); one that holds anything is kept and stays damage (what it holds may be
  someone's data), its finding says so.
* ``sidecar_missing``: a hashed data file without a sidecar; ``sidecar_foreign``: one whose
  sidecar is no regular file or does not name the key of that data file. Neither can be listed,
  so neither is scrubbed or evicted: the data file (and the bad sidecar) are removed.
* ``sidecar_orphan``: a sidecar whose data file is gone, older than ``stale_seconds`` (a store
  publishes the sidecar first: a younger one is ``in_progress``); removed.
* ``stale_temp``: a temporary file of a dead or stalled writer (the rule of
  :mod:`lmserde.l2.adapters.fs_temp_files`; a live writer's is ``in_progress``); removed.

Names that are none of the adapter's (no key name, no sidecar name; in the temporary directory,
anything but a regular file with a temporary's name) are ``unknown``: reported, never touched.
Before removing an entry its kind is checked again, so an object a concurrent store has just
published is not removed for what stood there before.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass

from lmserde.keys import ObjectKey
from lmserde.l2.adapters.fs_names import DATA_SUFFIX, SIDECAR_SUFFIX, is_hashed_name
from lmserde.l2.adapters.fs_temp_files import parse_temp_name, sweep_stale_temp_files
from lmserde.l2.contract.entry_scrub import EntryFinding, EntryScrub

__all__ = ["FSEntryLayout", "scrub_fs_entries", "ENTRY_REASONS"]

#: The reasons an entry is damage (see the module docstring).
ENTRY_REASONS = ("symlink", "fifo", "socket", "device", "directory", "sidecar_missing",
                 "sidecar_foreign", "sidecar_orphan", "stale_temp")


@dataclass(frozen=True)
class FSEntryLayout:
    """What the scrub needs to know of one ``fs`` adapter's directory."""

    base: str
    tmp_dir: str
    tmp_top: str  #: first component of the temporary directory, relative to ``base``
    parse_name: Callable[[str], ObjectKey | None]
    hashed_names: bool  #: whether ``h-<digest>.data`` names (with sidecars) are this naming's
    read_sidecar: Callable[[str], ObjectKey | None]  #: the key a hashed name's sidecar names
    domain: str
    stale_seconds: float


def _kind_reason(mode: int) -> str | None:
    """The damage reason of a non-regular entry at a key's name; ``None`` for a regular file."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "device"


def _lstat_mode(path: str) -> int | None:
    try:
        return os.lstat(path).st_mode
    except FileNotFoundError:
        return None


def _remove(path: str, reason: str) -> tuple[bool, str]:
    """Remove the damaged entry at ``path`` if it is still of the kind ``reason`` names;
    ``(removed, detail)``."""
    mode = _lstat_mode(path)
    if mode is None:
        return True, "already gone"
    now = _kind_reason(mode)
    if reason in ("symlink", "fifo", "socket", "device", "directory") and now != reason:
        return False, f"replaced meanwhile ({now or 'a regular file'}): kept"
    try:
        if stat.S_ISDIR(mode):
            os.rmdir(path)
        else:
            os.unlink(path)
    except FileNotFoundError:
        return True, "already gone"
    except OSError as exc:
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
            return False, "a directory that is not empty: kept (what it holds is never removed)"
        return False, f"cannot remove: {exc.strerror or exc}"
    return True, ""


def _finding(layout: FSEntryLayout, name: str, reason: str, delete: bool,
             also: str | None = None) -> EntryFinding:
    """A finding for ``name``; with ``delete`` the entry (then ``also``, a bad sidecar) removed."""
    if not delete:
        detail = ("a directory that is not empty: never removed" if reason == "directory"
                  and _not_empty(os.path.join(layout.base, name)) else "")
        return EntryFinding(name, reason, False, detail)
    removed, detail = _remove(os.path.join(layout.base, name), reason)
    if removed and also is not None:
        removed, detail = _remove(os.path.join(layout.base, also), "sidecar_foreign")
    return EntryFinding(name, reason, removed, detail)


def _not_empty(path: str) -> bool:
    try:
        with os.scandir(path) as entries:
            return any(True for _ in entries)
    except OSError:
        return False


def scrub_fs_entries(layout: FSEntryLayout, *, delete: bool = False,
                     now: float | None = None) -> EntryScrub:
    """Walk ``layout.base`` once (see the module docstring). ``OSError`` when it cannot be
    listed; an entry that vanishes meanwhile is skipped."""
    now = time.time() if now is None else now
    with os.scandir(layout.base) as entries:
        names = {entry.name for entry in entries}
    damaged: list[EntryFinding] = []
    unknown: list[str] = []
    in_progress = 0
    for name in sorted(names):
        path = os.path.join(layout.base, name)
        mode = _lstat_mode(path)
        if mode is None:
            continue
        if name == layout.tmp_top and stat.S_ISDIR(mode):
            continue  # its temporaries are judged below
        if layout.hashed_names and name.endswith(SIDECAR_SUFFIX) and is_hashed_name(
                name[: -len(SIDECAR_SUFFIX)] + DATA_SUFFIX):
            if name[: -len(SIDECAR_SUFFIX)] + DATA_SUFFIX in names:
                continue  # judged with its data file
            try:
                young = now - os.lstat(path).st_mtime <= layout.stale_seconds
            except FileNotFoundError:
                continue
            if young:
                in_progress += 1
            else:
                damaged.append(_orphan(layout, name, delete))
            continue
        hashed = layout.hashed_names and is_hashed_name(name)
        if not hashed and layout.parse_name(name) is None:
            unknown.append(name)
            continue
        reason = _kind_reason(mode)
        if reason is not None:
            damaged.append(_finding(layout, name, reason, delete))
        elif hashed and layout.read_sidecar(name) is None:
            side = name[: -len(DATA_SUFFIX)] + SIDECAR_SUFFIX
            if side not in names:
                damaged.append(_sidecar_finding(layout, name, "sidecar_missing", delete, None))
            else:
                damaged.append(_sidecar_finding(layout, name, "sidecar_foreign", delete, side))
    in_progress += _scrub_temps(layout, delete, now, damaged, unknown)
    return EntryScrub(damaged, unknown, in_progress)


def _orphan(layout: FSEntryLayout, name: str, delete: bool) -> EntryFinding:
    if not delete:
        return EntryFinding(name, "sidecar_orphan")
    data = name[: -len(SIDECAR_SUFFIX)] + DATA_SUFFIX
    if _lstat_mode(os.path.join(layout.base, data)) is not None:  # its store finished meanwhile
        return EntryFinding(name, "sidecar_orphan", False, "its data file appeared: kept")
    removed, detail = _remove(os.path.join(layout.base, name), "sidecar_orphan")
    return EntryFinding(name, "sidecar_orphan", removed, detail)


def _sidecar_finding(layout: FSEntryLayout, name: str, reason: str, delete: bool,
                     side: str | None) -> EntryFinding:
    if delete and layout.read_sidecar(name) is not None:  # a store repaired it meanwhile
        return EntryFinding(name, reason, False, "its sidecar was repaired meanwhile: kept")
    return _finding(layout, name, reason, delete, also=side)


def _scrub_temps(layout: FSEntryLayout, delete: bool, now: float,
                 damaged: list[EntryFinding], unknown: list[str]) -> int:
    """Add the stale temporaries to ``damaged`` and what is no temporary file to ``unknown``;
    the number of live or young temporaries."""
    mode = _lstat_mode(layout.tmp_dir)
    if mode is None or not stat.S_ISDIR(mode):
        return 0
    rel = os.path.relpath(layout.tmp_dir, layout.base)
    with os.scandir(layout.tmp_dir) as entries:
        for entry in entries:
            try:
                regular = entry.is_file(follow_symlinks=False)
            except OSError:
                regular = False
            if parse_temp_name(entry.name) is None or not regular:
                unknown.append(os.path.join(rel, entry.name))
    sweep = sweep_stale_temp_files(layout.tmp_dir, domain=layout.domain,
                                   stale_seconds=layout.stale_seconds, now=now, remove=delete)
    for name in sweep.removed_names:
        damaged.append(EntryFinding(os.path.join(rel, name), "stale_temp", True))
    for name in sweep.stale_left:
        damaged.append(EntryFinding(os.path.join(rel, name), "stale_temp", False,
                                    "cannot remove: see the log" if delete else ""))
    return sweep.kept_live + sweep.kept_young
