"""Entry scrubbing: what stands in an adapter's storage that is no readable object.

``lmserde scrub`` verifies the frames of the objects an adapter *lists*. Damage can also sit
where no listing looks: in a file system, a symlink or FIFO at a key's path, a directory there,
a data file whose name cannot be mapped back to its key, a name record without its object, a
temporary file a dead writer left. An adapter that can see such entries offers
:meth:`EntryScrubbingAdapter.scrub_entries`; scrub calls it (through :func:`scrub_entries_of`)
and reports what it found, per reason, next to the object verdicts.

The adapter decides what is damage: only entries it made, or that stand where its own entries
belong, and that hold nothing anyone could still need, are damage (and removed when asked).
Entries it did not make (a name that is none of its names) are listed as ``unknown`` and never
removed; entries a live writer may still be finishing are counted ``in_progress``, not damage.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Protocol

from lmserde.containment import describe_exception, must_propagate

__all__ = ["EntryFinding", "EntryScrub", "EntryScrubbingAdapter", "scrub_entries_of"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EntryFinding:
    """One damaged entry: its ``name`` (relative to the adapter's storage root), the ``reason``
    it is damage, whether it was ``removed``, and a ``detail`` (why it was kept, say)."""

    name: str
    reason: str
    removed: bool = False
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "reason": self.reason, "removed": self.removed,
                "detail": self.detail}


@dataclass(frozen=True)
class EntryScrub:
    """What one entry scrub found: the ``damaged`` entries, the names it does not know
    (``unknown``: never touched) and how many entries a live writer may still be finishing."""

    damaged: list[EntryFinding] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    in_progress: int = 0

    @property
    def remaining(self) -> list[EntryFinding]:
        """The damaged entries still there (not asked to remove, or kept: see ``detail``)."""
        return [f for f in self.damaged if not f.removed]


class EntryScrubbingAdapter(Protocol):
    """An adapter that can see entries of its storage that are no readable object."""

    def scrub_entries(self, *, delete: bool = False) -> EntryScrub | None:
        """Walk the adapter's storage for damaged entries (see the module docstring); remove
        them when ``delete`` is set. ``None``: this instance cannot (a wrapper whose inner
        adapter cannot). Storage that cannot be walked at all raises ``OSError``."""
        ...


def scrub_entries_of(adapter: Any, *, delete: bool = False) -> EntryScrub | None:
    """``adapter.scrub_entries(delete=delete)`` when it offers it, else ``None``. ``OSError``
    propagates (the storage could not be walked); anything else it raises is adapter code
    failing (``BaseException`` contained, only Ctrl-C on the main thread propagates): logged,
    and re-raised as ``RuntimeError`` naming the adapter."""
    method = getattr(adapter, "scrub_entries", None)
    if not callable(method):
        return None
    try:
        return method(delete=delete)
    except OSError:
        raise
    except BaseException as exc:
        if must_propagate(exc):
            raise
        _log.warning("L2 adapter %s: scrub_entries() raised %s", type(adapter).__name__,
                     describe_exception(exc))
        raise RuntimeError(f"L2 adapter {type(adapter).__name__}: scrub_entries() failed: "
                           f"{describe_exception(exc)}") from exc
