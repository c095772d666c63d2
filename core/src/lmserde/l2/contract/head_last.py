"""Head-last stores: an adapter writes an object's body first and its head when it is known.

The serde wrapper's frame header holds a checksum of the payload behind it. Computing that
checksum before handing the object to the adapter puts one pass over the payload in front of
every write. An adapter that can write an object's first bytes last offers
:meth:`HeadLastAdapter.submit_store_task_head_last`: the wrapper hands it the objects with their
header not yet written and one :class:`DeferredHead` each, the checksum runs on other threads
while the adapter writes the body, and the adapter calls :meth:`DeferredHead.finish_head` (which
waits for the checksum and writes the header into the object) just before writing the head.

Rules for the adapter:

- take the head's bytes from the object only after ``finish_head()`` returned (before, they are
  zero, which no load accepts);
- call ``finish_head()`` at most once per object, from any thread;
- an adapter that stops before writing the head (an error, or a key that was already stored) must
  not publish what it wrote: without its head the object is unusable. It need not call
  ``finish_head()`` then; the wrapper waits for the pending checksum before it reuses the buffer.

Fits adapters that write into a file or another store allowing writes at any offset before
publishing (``fs``, which links the finished temporary file under its name).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from lmserde.keys import ObjectKey
from lmserde.l2.contract.inner_delegation import probe_adapter

if TYPE_CHECKING:
    from lmserde.l2.contract.interface import L2TaskId
    from lmserde.memory import MemoryObj

__all__ = ["DeferredHead", "HeadLastAdapter", "adapter_writes_head_last"]


class DeferredHead(Protocol):
    """The not-yet-written head (first :attr:`head_bytes` bytes) of one object being stored."""

    @property
    def head_bytes(self) -> int:
        """Length of the head; the body is everything after it."""
        ...

    def finish_head(self) -> None:
        """Write the head into the object's first :attr:`head_bytes` bytes; may wait for the
        work it depends on. Called at most once, from any thread. Raises if the head cannot be
        produced: the object must then not be published."""
        ...


class HeadLastAdapter(Protocol):
    """An adapter that can write each object's body before its head (see the module docstring).

    The task completes through the adapter's ordinary store queue and event fd, exactly like a
    task of ``submit_store_task``.
    """

    def writes_head_last(self) -> bool:
        """Whether :meth:`submit_store_task_head_last` works on this instance."""
        ...

    def submit_store_task_head_last(self, keys: Sequence[ObjectKey], objects: Sequence[MemoryObj],
                                    heads: Sequence[DeferredHead]) -> L2TaskId:
        """``submit_store_task``, writing each object's body, then calling its head's
        :meth:`~DeferredHead.finish_head`, then writing the head, then publishing the object."""
        ...


def adapter_writes_head_last(adapter: Any) -> bool:
    """Whether ``adapter`` offers head-last stores (adapters without the probe do not; a probe
    that raises is contained and counts as "no", see :func:`probe_adapter`)."""
    submit = getattr(adapter, "submit_store_task_head_last", None)
    return callable(submit) and probe_adapter(adapter, "writes_head_last")
