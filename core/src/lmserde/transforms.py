"""The synchronous serde transforms: :class:`Serializer` and :class:`Deserializer` (no threads, no fds).

The bottom of the serde contracts: :mod:`lmserde.multi` bridges them to groups,
:class:`~lmserde.SerdePair` pairs them, :class:`~lmserde.SerdeProcessor` (:mod:`lmserde.base`)
runs them asynchronously. Both are re-exported by :mod:`lmserde.base`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from lmserde.keys import ObjectKey
from lmserde.layout import MemoryLayoutDesc
from lmserde.memory import MemoryObj

__all__ = ["Serializer", "Deserializer"]


class Serializer(ABC):
    """Turns one KV-shaped object into bytes. Pure: no threads, no fds.

    ``serialize(src, dst, key)`` writes into the byte buffer ``dst`` (capacity at least
    ``estimate_serialized_size(layout of src)``) and returns the number of bytes written. Write raw
    bytes through ``memoryview(dst.byte_array).cast("B")`` or a tensor view, never by slicing
    ``byte_array`` directly. ``key`` is the object's key; per-object serdes (encryption) read it.

    ``authenticates_output`` (class or instance attribute, default ``False``): ``True`` when the
    bytes written carry their own authentication bound to the object's key (AES-GCM frame
    version 2), so that a stored-object frame may skip its own checksum. Set it only when any
    change to the bytes, or bytes of another key, is certain to fail ``deserialize``.

    A serializer that writes every output byte in its own pass may also hash them there, with the
    hasher :func:`lmserde.payload_hasher` returns for ``dst`` (:mod:`lmserde.frame_checksum`):
    the serde wrapper then does not hash the payload itself.
    """

    authenticates_output: bool = False

    @abstractmethod
    def serialize(self, src: MemoryObj, dst: MemoryObj, key: ObjectKey) -> int:
        """Write the serialized form of ``src`` into ``dst``; return the bytes written.

        Pre: ``src`` is read-locked by the caller and not modified during the call; ``dst`` is a
        byte buffer of at least ``estimate_serialized_size(src.get_layout())`` bytes, owned by
        the caller and written by nobody else. Post: bytes ``[0, n)`` of ``dst`` hold the output
        (``0 <= n <= capacity``, an ``int``); the caller narrows ``dst`` to ``n``. Raise on any
        problem (the item then fails; what was written to ``dst`` is discarded). Neither object
        is kept after the call returns. May run on any worker thread, concurrently with other
        calls on the same instance: keep no per-call state on ``self`` without a lock.
        """

    @abstractmethod
    def estimate_serialized_size(self, layout_desc: MemoryLayoutDesc) -> int:
        """An upper bound on ``serialize``'s output for any object of this layout.

        Depends on the layout only; any safety margin belongs here. Pure and thread-safe; may be
        called on any thread, before or between ``serialize`` calls. Raise ``ValueError`` for a
        layout the serde cannot encode.
        """


class Deserializer(ABC):
    """Turns bytes back into one KV-shaped object. Pure: no threads, no fds.

    ``src`` may be larger than the stored frame: lengths come from ``dst`` or an in-band header,
    never from ``len(src)``. Any problem raises; the caller turns it into a miss.

    ``reports_payload_checksum`` (class or instance attribute, default ``False``): ``True`` when
    ``deserialize`` feeds all of ``src`` to the hasher :func:`lmserde.payload_hasher` returns for
    it (whenever it returns one), in its own pass over the bytes; the serde wrapper then does not
    hash large loaded payloads itself (it still does when the hasher did not cover them).
    """

    reports_payload_checksum: bool = False

    @abstractmethod
    def deserialize(self, src: MemoryObj, dst: MemoryObj, key: ObjectKey) -> None:
        """Decode ``src`` into the pre-allocated ``dst`` (its layout says what to produce).

        Pre: ``src`` holds at least the stored bytes (possibly more: never use ``len(src)`` as
        the frame length); ``dst`` is write-locked by the caller and written by nobody else.
        Post: ``dst`` holds the object. Raise ``ValueError`` (or a subclass) on corrupt,
        truncated, foreign or mismatching input (the caller turns it into a miss and zeroes
        ``dst``; the serde wrapper deletes the stored object); never return garbage. Raise
        anything else for a failure that is not the input's (a key service down): the load
        misses and a framed object is kept. Neither object is kept after the call. May run on
        any worker thread, concurrently with other calls on the same instance.
        """
