"""What each key of a finished deserialize comes to: a hit, or a miss of one kind.

The serde wrapper's load path hands the serde the payloads that passed their frame checks; what
the serde reports per item, with whether the payload checksum confirmed, decides the key:

- ``checksum``: the payload checksum (which ran while the serde decoded) failed — proven damage;
- ``auth``: the authenticated frame's MAC (which ran while the serde decoded) did not verify —
  not this reader's object (kept);
- ``hit``: decoded, checksum confirmed;
- ``foreign``: the deserializer raised :class:`~lmserde.ForeignObjectError` ("not mine to read");
- ``unkeyed``: it raised :class:`~lmserde.UnkeyedObjectError` (its key was forgotten or retired);
- ``decode``: the deserializer refused the bytes (``ValueError``; unframed, any error) — damage;
- ``kept``: the serde failed for a reason other than the bytes (a key service unreachable,
  ``MemoryError``, a processor that reports no per-item error): a miss, the object kept.
"""

from __future__ import annotations

import logging

from lmserde.base import SerdeProcessor
from lmserde.foreign_object import ForeignObjectError, UnkeyedObjectError
from lmserde.l2.serde.stored_frame import FrameRejected
from lmserde.l2.serde.wrapper_task import NoItemError, WrapperTask

__all__ = ["DECODE_OUTCOMES", "decode_outcome", "deserialize_errors", "payload_confirmed"]

_log = logging.getLogger("lmserde.l2.serde.wrapper")

DECODE_OUTCOMES = ("hit", "checksum", "auth", "foreign", "unkeyed", "decode", "kept")


def decode_outcome(error: BaseException | None, *, confirmed: bool | str, framed: bool) -> str:
    """The outcome (one of :data:`DECODE_OUTCOMES`) of one decoded item.

    Framed, only a ``ValueError`` condemns the bytes — the deserializer contract's "these bytes
    are bad" (the frame already vouched for them: checksum, key, config); anything else is a
    failure of the serde or its environment, and deleting would wipe good objects for as long as
    it lasts. Unframed, nothing vouches for the bytes: every failed decode condemns them, except
    the serde's explicit "not mine". ``confirmed``: ``True``, or the reason the payload's
    check refused it (``False``: ``checksum``).
    """
    if confirmed is not True:
        return confirmed or "checksum"
    if error is None:
        return "hit"
    if isinstance(error, UnkeyedObjectError):
        return "unkeyed"
    if isinstance(error, ForeignObjectError):
        return "foreign"
    if not framed or isinstance(error, ValueError):
        return "decode"
    return "kept"


def deserialize_errors(serde: SerdeProcessor, serde_id: int, items: int
                       ) -> list[BaseException | None] | None:
    """Per item of a finished deserialize, what it raised (``None``: decoded); ``None`` while it
    runs. A processor without per-item outcomes reports a failed task as :class:`NoItemError`
    for every item."""
    if serde.reports_item_outcomes:
        outcome = serde.query_deserialize_outcome(serde_id)
        if outcome is None:
            return None
        return [outcome.item_errors[i] if i < len(outcome.item_errors) else NoItemError()
                for i in range(items)]
    result = serde.query_deserialize_result(serde_id)
    if result is None:
        return None
    return [None] * items if result else [NoItemError()] * items


def payload_confirmed(task: WrapperTask, slot: int) -> bool | str:
    """Wait for the slot's payload checksum or MAC (started when its frame was opened); ``True``
    when it matches, else the reason it was refused for (``checksum``, ``auth``; logged)."""
    confirm = task.confirms[slot] if task.confirms else None
    if confirm is None:
        return True
    try:
        confirm()
    except FrameRejected as exc:
        _log.warning("serde wrapper: stored object for key %s refused (%s)",
                     task.keys[task.positions[slot]].chunk_hash.hex(), exc)
        return exc.reason
    return True
