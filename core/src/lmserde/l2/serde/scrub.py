"""Scrubbing: walk every object of a serde-wrapped adapter and verify its stored-object frame.

Each object listed by the inner adapter (``list_l2_keys``) is read back raw and its frame is
checked (format, length, config, key, checksum) against the wrapper's serde configuration; with
``decode`` the objects that pass are also decoded through the wrapper's normal load path into
scratch objects of the layout the frame records: a decode the wrapper refuses is damage (the
reason it gave, usually ``decode``), one that fails for another reason (a key service that
cannot be reached) is ``unverified``, not damage. Without ``decode`` an object whose payload
carries no frame checksum (its serde authenticates it: aesgcm frame v2) is ``unchecked``: its
frame is fine, its payload bytes were not checked. Nothing is deleted unless ``delete`` is set.
An object larger than ``max_object_bytes`` is not read (a buffer of its size is never
allocated): it is reported as ``length`` damage, as no KV chunk is that large.

An object whose frame names one of the wrapper's ``read_also`` configurations is checked with that
configuration (its bound, its checksum) and gets the verdict ``read_also``: readable, not damage,
not yet in the current configuration (``lmserde scrub --migrate``,
:mod:`~lmserde.l2.serde.migrate`, rewrites it).

Damage is what the reader can prove is bad (the frame's ``DAMAGE_REASONS``: ``format``,
``length``, ``checksum``, ``decode``). An object written under another serde configuration, for
another key or layout, by another frame version or with key material this reader does not hold
(``NOT_MINE_REASONS``: ``config``, ``key``, ``layout``, ``foreign``, ``unkeyed``) is *not mine*:
another fleet may read it. It is reported apart (``report.foreign``), never counts as damage and
is deleted only with ``delete_foreign``. Among those, an object whose key material the reader's
key provider no longer holds (``unkeyed``: a forgotten tenant, a retired key version; the
authenticated frame says so for a frame keyring, for any serde; for a serde's own keys only a
decode can tell, so ``delete_unkeyed`` implies ``decode``) is listed in ``report.unkeyed`` too and
deleted with ``delete_unkeyed`` (crypto-shredding reclaims the space), which is right only when
the reader's keyring is the authority for every tenant on that storage.

Before the objects, the inner adapter's *entries* are scrubbed when it can see them
(:mod:`lmserde.l2.contract.entry_scrub`; ``fs``: symlinks, FIFOs and directories at key paths,
hashed names whose sidecar is missing or names another key, orphan sidecars, temporary files of
dead writers): each is damage under its own reason, removed with ``delete`` (a directory only
when empty), and a name that is none of the adapter's is ``unknown``, never touched.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from lmserde.keys import ObjectKey
from lmserde.l2.contract.entry_scrub import EntryScrub, scrub_entries_of
from lmserde.l2.contract.sync_driver import load_sync
from lmserde.l2.serde.stored_frame import (
    DEFAULT_MAX_OBJECT_BYTES,
    FRAME_HEADER_BYTES,
    NOT_MINE_REASONS,
    FrameRejected,
    key_fingerprint,
    tensor_bytes,
)
from lmserde.l2.serde.wrapper import SerdeL2AdapterWrapper
from lmserde.layout import MemoryLayoutDesc
from lmserde.memory import MemoryFormat, TensorMemoryObj

__all__ = ["DEFAULT_MAX_OBJECT_BYTES", "NOT_MINE", "ScrubReport", "scrub_adapter", "check_frame",
           "groups_within_l1", "key_dict", "check_walk"]

_log = logging.getLogger(__name__)

#: What a key can end as: ``ok``, a reject reason, ``missing`` (listed, then gone),
#: ``unchecked`` (without decoding: frame fine, but its payload carries no checksum because its
#: serde authenticates it, e.g. aesgcm frame v2, so only a decode checks the payload's bytes),
#: ``undecoded`` (frame fine, but its layout is stored as a digest: neither the layout check nor
#: a decode is possible offline), ``read_also`` (frame fine, written by one of the wrapper's
#: ``read_also`` configurations: readable, not yet migrated) or ``unverified`` (not examined:
#: the adapter could not say its size, or the decode failed for a reason other than the bytes,
#: e.g. a key service that cannot be reached, or it needs more L1 than there is; not damage,
#: never deleted).
Verdict = str
#: Verdicts that are not damage.
_NOT_DAMAGE = frozenset({"ok", "missing", "unchecked", "undecoded", "unverified", "read_also"})
#: Verdicts of objects that are someone else's ("not mine"): not damage, kept unless asked.
NOT_MINE = NOT_MINE_REASONS


def key_dict(key: ObjectKey) -> dict[str, Any]:
    """A key as the JSON reports show it (chunk hash in hex, tenant, model, rank, group)."""
    return {"chunk_hash": key.chunk_hash.hex(), "model_name": key.model_name,
            "kv_rank": key.kv_rank, "object_group_id": key.object_group_id,
            "cache_salt": key.cache_salt}


@dataclass
class ScrubReport:
    """Counts by verdict, the damaged keys and how many of them were deleted, the objects that
    are someone else's (``foreign``, deleted only on request: ``foreign_deleted``) and the
    inner adapter's damaged entries (``entries``; ``None`` when it cannot see entries)."""

    scanned: int = 0
    verdicts: dict[Verdict, int] = field(default_factory=dict)
    damaged: list[ObjectKey] = field(default_factory=list)
    deleted: int = 0
    foreign: list[ObjectKey] = field(default_factory=list)
    foreign_deleted: int = 0
    unkeyed: list[ObjectKey] = field(default_factory=list)
    unkeyed_deleted: int = 0
    entries: EntryScrub | None = None

    @property
    def ok(self) -> int:
        return self.verdicts.get("ok", 0)

    @property
    def found_damage(self) -> bool:
        """Whether any damaged object or damaged entry was found (removed or not)."""
        return bool(self.damaged) or bool(self.entries is not None and self.entries.damaged)

    @property
    def damage_remaining(self) -> int:
        """Damaged objects not deleted plus damaged entries still there."""
        entries = 0 if self.entries is None else len(self.entries.remaining)
        return len(self.damaged) - self.deleted + entries

    @property
    def unchecked(self) -> int:
        """Objects whose frame is fine but whose payload only a decode can check (its serde
        authenticates it instead of the frame's checksum) and that were not decoded."""
        return self.verdicts.get("unchecked", 0)

    @property
    def unverified(self) -> int:
        """Objects whose decode failed for a reason other than their bytes (kept, not damage)."""
        return self.verdicts.get("unverified", 0)

    def add(self, key: ObjectKey, verdict: Verdict) -> None:
        self.scanned += 1
        self.verdicts[verdict] = self.verdicts.get(verdict, 0) + 1
        if verdict in NOT_MINE:
            self.foreign.append(key)
            if verdict == "unkeyed":
                self.unkeyed.append(key)
        elif verdict not in _NOT_DAMAGE:
            self.damaged.append(key)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready summary (keys as hex chunk hashes with their tenant and model; entries
        by name, reason, whether removed, and why one was kept)."""
        entries = self.entries
        return {
            "scanned": self.scanned,
            "ok": self.ok,
            "verdicts": dict(sorted(self.verdicts.items())),
            "damaged": [key_dict(k) for k in self.damaged],
            "deleted": self.deleted,
            "foreign": [key_dict(k) for k in self.foreign],
            "foreign_deleted": self.foreign_deleted,
            "unkeyed": [key_dict(k) for k in self.unkeyed],
            "unkeyed_deleted": self.unkeyed_deleted,
            "entries": None if entries is None else {
                "verdicts": dict(sorted(_count_reasons(entries).items())),
                "damaged": [f.as_dict() for f in entries.damaged],
                "removed": sum(f.removed for f in entries.damaged),
                "unknown": list(entries.unknown),
                "in_progress": entries.in_progress,
            },
            "damage_remaining": self.damage_remaining,
        }


def _count_reasons(entries: EntryScrub) -> dict[str, int]:
    counts: dict[str, int] = {}
    for finding in entries.damaged:
        counts[finding.reason] = counts.get(finding.reason, 0) + 1
    return counts


def _byte_obj(size: int) -> TensorMemoryObj:
    return TensorMemoryObj.allocate(MemoryLayoutDesc([[size]], [torch.uint8]),
                                    fmt=MemoryFormat.BINARY_BUFFER)


def check_frame(wrapper: SerdeL2AdapterWrapper, key: ObjectKey,
                size: int) -> tuple[Verdict, MemoryLayoutDesc | None]:
    """Read one object raw and verify its frame against the configuration it names (the
    wrapper's own or a ``read_also`` one); the verdict and the layout it records."""
    buf = _byte_obj(max(size, 1))
    buf.set_used_size(size)
    if not load_sync(wrapper.inner_adapter, [key], [buf]).test(0):
        return "missing", None
    try:
        framer = wrapper.framer
        assert framer is not None
        header = framer.read_header(
            tensor_bytes(buf.raw_data[:min(size, framer.header_bytes)]))
        index = wrapper.read_configs.index_of(header.config_fingerprint)
        if index is None:  # before anything this config judges
            return "config", None
        if header.key_fingerprint != key_fingerprint(key):
            return "key", None
        layout = header.layout()
        if layout is None and header.authenticated:  # the MAC covers the layout in full
            return "undecoded", None
        reader = wrapper.read_configs[index]
        assert reader.framer is not None
        bound = reader.shape.payload_bound(layout) if layout is not None else size
        reader.framer.open(buf, key, layout, bound)
    except FrameRejected as exc:
        return exc.reason, None
    except ValueError as exc:  # this very config recorded a layout it cannot have written
        _log.info("scrub: %s: %s", key.chunk_hash.hex(), exc)
        return "format", None
    if layout is None:
        return "undecoded", None
    if index >= wrapper.written_configs:  # not a config it writes (auto: any candidate)
        return "read_also", layout
    # no payload checksum: the serde authenticates the payload, which only a decode checks
    return ("ok" if header.payload_checksum is not None or header.authenticated
            else "unchecked"), layout


class _Rejections:
    """Listener recording the reason the wrapper refused each key (``on_l2_keys_rejected``)."""

    def __init__(self) -> None:
        self.reasons: dict[ObjectKey, str] = {}

    def on_l2_keys_rejected(self, reason: str, keys: list[ObjectKey]) -> None:
        for key in keys:
            self.reasons[key] = reason


def _decode(wrapper: SerdeL2AdapterWrapper, keys: list[ObjectKey],
            layouts: list[MemoryLayoutDesc], rejections: _Rejections) -> list[Verdict]:
    """Decode ``keys`` through the wrapper's load path into scratch objects: ``ok`` for a hit,
    the reason the wrapper refused a key for, ``missing`` for an object gone since its frame was
    checked, or ``unverified`` for another miss (the serde or the adapter failed for a reason
    other than the bytes: the wrapper keeps such objects)."""
    rejections.reasons.clear()  # only this load's refusals count
    dsts = [TensorMemoryObj.allocate(layout) for layout in layouts]
    bitmap = load_sync(wrapper, keys, dsts)
    verdicts = ["ok" if bitmap.test(i) else rejections.reasons.pop(key, "unverified")
                for i, key in enumerate(keys)]
    unverified = [key for key, verdict in zip(keys, verdicts) if verdict == "unverified"]
    if unverified:  # an object deleted since its frame was checked is missing, not unverified
        still, unknown = wrapper.examine_sizes(unverified)
        gone = {key for key in unverified if key not in still and key not in unknown}
        verdicts = ["missing" if key in gone else verdict for key, verdict in zip(keys, verdicts)]
    return verdicts


def groups_within_l1(wrapper: SerdeL2AdapterWrapper,
                     items: list[tuple[ObjectKey, MemoryLayoutDesc]]
                     ) -> tuple[list[list[tuple[ObjectKey, MemoryLayoutDesc]]], list[ObjectKey]]:
    """``items`` in groups whose load temporaries fit the wrapper's L1 together (a load reserves
    each object's stored bound there), and the keys that alone do not fit (logged)."""
    budget = wrapper.l1_manager.capacity_bytes
    too_big: list[ObjectKey] = []
    groups: list[list[tuple[ObjectKey, MemoryLayoutDesc]]] = []
    used = 0
    for key, layout in items:
        need = wrapper.stored_bound(layout)
        if need > budget:
            _log.warning("scrub: %s needs %d bytes of L1 to decode, more than its %d: not "
                         "decoded (give scrub more L1, --l1-bytes)", key.chunk_hash.hex(), need,
                         budget)
            too_big.append(key)
            continue
        if not groups or used + need > budget:
            groups.append([])
            used = 0
        groups[-1].append((key, layout))
        used += need
    return groups, too_big


def _decode_within(wrapper: SerdeL2AdapterWrapper, items: list[tuple[ObjectKey, MemoryLayoutDesc]],
                   rejections: _Rejections) -> list[Verdict]:
    """:func:`_decode` in groups whose temporaries fit the wrapper's L1 (:func:`groups_within_l1`);
    an object that alone does not fit is ``unverified``."""
    groups, too_big = groups_within_l1(wrapper, items)
    verdicts: dict[ObjectKey, Verdict] = {key: "unverified" for key in too_big}
    for group in groups:
        keys = [key for key, _ in group]
        verdicts.update(zip(keys, _decode(wrapper, keys, [lay for _, lay in group], rejections)))
    return [verdicts[key] for key, _ in items]


def check_walk(wrapper: SerdeL2AdapterWrapper, tool: str, *, batch: int,
               max_object_bytes: int) -> None:
    """``ValueError`` unless ``tool`` (scrub, migrate) can walk ``wrapper``'s objects: framed
    objects, an adapter that reports their sizes, ``batch >= 1`` and a ``max_object_bytes`` that
    holds at least a frame header."""
    if wrapper.framer is None:
        raise ValueError(f"{tool} needs framed objects: this adapter stores raw serde bytes "
                         "(serde_frame is false), which carry nothing to verify")
    if not wrapper.inner_adapter.reports_object_sizes():
        raise ValueError(f"{tool} needs an adapter that reports stored object sizes")
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    if max_object_bytes < FRAME_HEADER_BYTES:
        raise ValueError(f"max_object_bytes must be >= {FRAME_HEADER_BYTES}, "
                         f"got {max_object_bytes}")


def scrub_adapter(
    wrapper: SerdeL2AdapterWrapper,
    *,
    keys: Iterable[ObjectKey] | None = None,
    decode: bool = False,
    delete: bool = False,
    delete_foreign: bool = False,
    delete_unkeyed: bool = False,
    entries: bool = True,
    batch: int = 64,
    on_progress: Callable[[int], None] | None = None,
    max_object_bytes: int = DEFAULT_MAX_OBJECT_BYTES,
) -> ScrubReport:
    """Verify every object of ``wrapper``'s inner adapter (or ``keys``); see the module docstring.

    Needs a framing wrapper over an adapter that reports object sizes. ``on_progress(n)`` is
    called after each batch with the number of keys it held. With ``delete`` the damaged keys are
    deleted from the inner adapter (``report.deleted``) and its damaged entries removed;
    ``unverified`` objects (a decode that failed for a reason other than the bytes) are never
    deleted, objects that are someone else's (:data:`NOT_MINE`) only with ``delete_foreign``
    (``report.foreign_deleted``), and those among them whose key the reader's key provider no
    longer holds (``unkeyed``) with ``delete_unkeyed``, which implies ``decode``
    (``report.unkeyed_deleted``). Objects over ``max_object_bytes`` are ``length`` damage,
    unread. ``entries`` (default) scrubs the inner adapter's entries first, when it can see
    them (``report.entries``); ``OSError`` when its storage cannot be walked.
    """
    check_walk(wrapper, "scrub", batch=batch, max_object_bytes=max_object_bytes)
    decode = decode or delete_unkeyed  # only the serde knows whether it holds an object's key
    report = ScrubReport()
    if entries:
        report.entries = scrub_entries_of(wrapper.inner_adapter, delete=delete)
    listed = list(wrapper.list_l2_keys() if keys is None else keys)
    rejections = _Rejections()
    wrapper.register_listener(rejections)
    try:
        for start in range(0, len(listed), batch):
            _scrub_batch(wrapper, listed[start:start + batch], report, decode, max_object_bytes,
                         rejections)
            if on_progress is not None:
                on_progress(len(listed[start:start + batch]))
    finally:
        wrapper.unregister_listener(rejections)
    if delete and report.damaged:
        wrapper.inner_adapter.delete(report.damaged)
        report.deleted = len(report.damaged)
    if delete_foreign and report.foreign:
        wrapper.inner_adapter.delete(report.foreign)
        report.foreign_deleted = len(report.foreign)
        report.unkeyed_deleted = len(report.unkeyed)
    elif delete_unkeyed and report.unkeyed:
        wrapper.inner_adapter.delete(report.unkeyed)
        report.unkeyed_deleted = len(report.unkeyed)
    return report


def _scrub_batch(wrapper: SerdeL2AdapterWrapper, keys: Sequence[ObjectKey], report: ScrubReport,
                 decode: bool, max_object_bytes: int, rejections: _Rejections) -> None:
    sizes, unknown = wrapper.examine_sizes(keys)
    to_decode: list[tuple[ObjectKey, MemoryLayoutDesc]] = []
    framed: dict[ObjectKey, Verdict] = {}
    for key in keys:
        size = sizes.get(key)
        if size is None:
            report.add(key, "unverified" if key in unknown else "missing")
            continue
        if size > max_object_bytes:
            _log.info("scrub: %s: %d bytes, over the %d-byte limit: not read",
                      key.chunk_hash.hex(), size, max_object_bytes)
            report.add(key, "length")
            continue
        verdict, layout = check_frame(wrapper, key, size)
        if verdict in ("ok", "unchecked", "read_also") and decode and layout is not None:
            to_decode.append((key, layout))
            framed[key] = verdict
            continue
        report.add(key, verdict)
    if to_decode:
        for (key, _layout), verdict in zip(to_decode,
                                           _decode_within(wrapper, to_decode, rejections)):
            # a decoded read_also object stays read_also: still to be migrated
            report.add(key, framed[key] if verdict == "ok" and framed[key] == "read_also"
                       else verdict)
