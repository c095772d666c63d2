"""Migrating a tier to its current serde config: rewrite what a ``read_also`` config wrote.

:func:`migrate_adapter` walks the objects of a serde wrapper's inner adapter (``list_l2_keys``,
or the given keys), checks each frame as scrub does (:func:`~lmserde.l2.serde.scrub.check_frame`)
and rewrites each object whose frame names one of the wrapper's ``read_also`` configurations:
it loads the object through the wrapper (decoded with that configuration), stores it back
through the wrapper (encoded with the current ``serde``: a framed wrapper's replacing store
writes the new object over the old one, whole) and reads its frame again to confirm that the
current configuration is there now.

- **Resumable**: objects already in the current configuration are skipped, so a run that was
  interrupted (Ctrl-C, a crash, a lost connection) is finished by running it again; each batch
  is complete (loaded, stored, confirmed) before the next starts.
- **Never deletes**: an object that cannot be loaded, stored or confirmed stays as it was (its
  ``read_also`` configuration still reads it) and is listed in ``failed`` with the step that
  failed. Objects of other configurations, keys or key material and damaged objects are counted
  by their scrub verdict and left alone (``lmserde scrub --delete`` is the tool for damage).
- **Safe beside a running fleet**: a rewrite is a whole-object replace: a load sees the old
  object or the new one, whole, or (on ``fs``, sizing the old file and then opening the new one)
  misses once; never wrong bytes, nothing deleted. A fleet member storing
  the same key meanwhile stores the same chunk (the key names its content): whichever write
  lands last, the object is whole and readable. A fleet member still configured with the old
  serde may write old objects after the pass: run the migration again once every writer has the
  new config.
- **Lossy configurations**: the rewritten object holds what the old configuration decodes,
  encoded with the current one; a lossy current configuration adds its error to the old one's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from lmserde.keys import ObjectKey
from lmserde.l2.contract.sync_driver import load_sync, store_sync
from lmserde.l2.serde.scrub import (
    DEFAULT_MAX_OBJECT_BYTES,
    NOT_MINE,
    check_frame,
    check_walk,
    groups_within_l1,
    key_dict,
)
from lmserde.l2.serde.wrapper import SerdeL2AdapterWrapper
from lmserde.layout import MemoryLayoutDesc
from lmserde.memory import TensorMemoryObj

__all__ = ["MigrateReport", "migrate_adapter", "MIGRATE_STEPS"]

_log = logging.getLogger(__name__)

#: The step a rewrite failed at: ``l1`` (the object alone needs more L1 than there is),
#: ``load`` (the old configuration did not decode it: gone, damaged or a key service down),
#: ``store`` (the store through the current configuration failed) or ``confirm`` (after the
#: store the object is not in the current configuration: the adapter kept the old object, or
#: another writer replaced it meanwhile).
MIGRATE_STEPS = ("l1", "load", "store", "confirm")

#: Scrub verdicts that are damage (counted, never touched here).
_FINE = frozenset({"ok", "unchecked", "missing", "read_also", "undecoded", "unverified"})


@dataclass
class MigrateReport:
    """What a migration did: ``scanned`` objects, their scrub ``verdicts`` before it (``ok``:
    already in the current configuration, ``read_also``: to rewrite, ...), ``migrated`` (the
    rewritten keys) and ``failed`` (key -> the step it failed at, :data:`MIGRATE_STEPS`; the
    object was kept as it was)."""

    scanned: int = 0
    verdicts: dict[str, int] = field(default_factory=dict)
    migrated: list[ObjectKey] = field(default_factory=list)
    failed: dict[ObjectKey, str] = field(default_factory=dict)

    @property
    def damaged(self) -> int:
        """Objects whose verdict is damage (left alone: ``lmserde scrub --delete`` removes them)."""
        return sum(n for verdict, n in self.verdicts.items()
                   if verdict not in _FINE and verdict not in NOT_MINE)

    @property
    def foreign(self) -> int:
        """Objects of configurations, keys or key material this wrapper does not read (kept)."""
        return sum(n for verdict, n in self.verdicts.items() if verdict in NOT_MINE)

    def add(self, verdict: str) -> None:
        self.scanned += 1
        self.verdicts[verdict] = self.verdicts.get(verdict, 0) + 1

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready summary (keys as in :meth:`~lmserde.l2.serde.scrub.ScrubReport.as_dict`)."""
        return {
            "scanned": self.scanned,
            "verdicts": dict(sorted(self.verdicts.items())),
            "migrated": len(self.migrated),
            "failed": [{**key_dict(key), "step": step} for key, step in self.failed.items()],
            "damaged": self.damaged,
            "foreign": self.foreign,
        }


def migrate_adapter(
    wrapper: SerdeL2AdapterWrapper,
    *,
    keys: Iterable[ObjectKey] | None = None,
    batch: int = 64,
    on_progress: Callable[[int], None] | None = None,
    max_object_bytes: int = DEFAULT_MAX_OBJECT_BYTES,
) -> MigrateReport:
    """Rewrite every object of ``wrapper``'s inner adapter (or of ``keys``) that a ``read_also``
    configuration wrote in the wrapper's current configuration; see the module docstring.

    Needs a framing wrapper with ``read_also`` configurations over an adapter that reports
    object sizes (``ValueError`` otherwise). ``on_progress(n)`` is called after each batch of
    ``n`` keys is done; what it raises stops the migration after that batch (a rerun goes on
    from there). Objects over ``max_object_bytes`` are not read (scrub's ``length``).
    """
    check_walk(wrapper, "migrate", batch=batch, max_object_bytes=max_object_bytes)
    if len(wrapper.read_configs) < 2:
        raise ValueError("nothing to migrate from: the spec has no 'read_also' naming the serde "
                         "configs whose objects should be rewritten")
    report = MigrateReport()
    listed = list(wrapper.list_l2_keys() if keys is None else keys)
    for start in range(0, len(listed), batch):
        chunk = listed[start:start + batch]
        _migrate_batch(wrapper, chunk, report, max_object_bytes)
        if on_progress is not None:
            on_progress(len(chunk))
    return report


def _migrate_batch(wrapper: SerdeL2AdapterWrapper, keys: Sequence[ObjectKey],
                   report: MigrateReport, max_object_bytes: int) -> None:
    sizes, unknown = wrapper.examine_sizes(keys)
    old: list[tuple[ObjectKey, MemoryLayoutDesc]] = []
    for key in keys:
        size = sizes.get(key)
        if size is None:
            report.add("unverified" if key in unknown else "missing")
            continue
        if size > max_object_bytes:
            report.add("length")
            continue
        verdict, layout = check_frame(wrapper, key, size)
        report.add(verdict)
        if verdict == "read_also" and layout is not None:
            old.append((key, layout))
    groups, too_big = groups_within_l1(wrapper, old)
    report.failed.update((key, "l1") for key in too_big)
    for group in groups:
        _rewrite(wrapper, group, report)


def _rewrite(wrapper: SerdeL2AdapterWrapper, items: list[tuple[ObjectKey, MemoryLayoutDesc]],
             report: MigrateReport) -> None:
    """Load ``items`` (old configurations), store them (current one), confirm the frames."""
    keys = [key for key, _ in items]
    objects = [TensorMemoryObj.allocate(layout) for _, layout in items]
    hits = load_sync(wrapper, keys, objects)
    loaded = [i for i in range(len(keys)) if hits.test(i)]
    report.failed.update((keys[i], "load") for i in range(len(keys)) if not hits.test(i))
    if not loaded:
        return
    stored = store_sync(wrapper, [keys[i] for i in loaded], [objects[i] for i in loaded])
    if not stored.is_successful():
        _log.warning("migrate: storing %d objects in the current config failed; they keep "
                     "their old config", len(loaded))
        report.failed.update((keys[i], "store") for i in loaded)
        return
    sizes, _unknown = wrapper.examine_sizes([keys[i] for i in loaded])
    for i in loaded:
        key = keys[i]
        size = sizes.get(key)
        verdict = "missing" if size is None else check_frame(wrapper, key, size)[0]
        if verdict in ("ok", "unchecked"):
            report.migrated.append(key)
        else:
            _log.warning("migrate: %s is '%s' after its rewrite (the adapter kept the old object, "
                         "or another writer replaced it)", key.chunk_hash.hex(), verdict)
            report.failed[key] = "confirm"
