"""The serde contracts: synchronous transforms and the asynchronous, fd-signalled processor.

:class:`Serializer` and :class:`Deserializer` live in :mod:`lmserde.transforms` (below the
multi-output contract and :class:`~lmserde.SerdePair`, which :class:`SerdeProcessor` returns) and
are re-exported here.
"""

from __future__ import annotations

import copy
import json
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lmserde.keys import ObjectKey
from lmserde.memory import MemoryObj
from lmserde.serde_pair import SerdePair
from lmserde.size_contract import SerdeSizeContract
from lmserde.transforms import Deserializer, Serializer

if TYPE_CHECKING:
    from lmserde.task_outcome import TaskOutcome

__all__ = ["SerdeTaskId", "Serializer", "Deserializer", "SerdeProcessor", "SerdeConfig"]

SerdeTaskId = int


class SerdeProcessor(ABC):
    """Asynchronous, batched serde: submit returns an id at once; completion signals an event fd.

    The serialize and deserialize fds are distinct and coalescing. ``query_*_result(id)`` returns
    ``True`` (every item succeeded) or ``False`` exactly once, ``None`` while pending, for unknown
    ids and after the result was taken; it never raises. ``close()`` releases fds and workers.

    Thread safety: every method may be called from any thread, concurrently (LMCache's store and
    prefetch controllers share one processor). Ownership: the objects of a submitted task belong
    to the processor until its result is taken — the caller keeps sources read-locked and
    destinations write-locked and does not touch them; after the result is taken the processor
    holds no reference to them.

    Identity of the byte format: :meth:`get_config` says what writes the bytes (type, format
    version, the options that change the bytes); :meth:`authenticates_output` whether they
    authenticate themselves. The registry attaches the config with :meth:`set_config`.
    """

    _lmserde_config: dict[str, Any] | None = None

    #: The type name the processor was built for (names threads, logs and the default config).
    serde_type: str | None = None
    #: The declared size contract; the registry attaches the spec's to what it builds. ``None``:
    #: unknown here (the serde wrapper then asks the registry for ``serde_type``'s).
    size_contract: SerdeSizeContract | None = None
    #: Whether :meth:`query_serialize_outcome` / :meth:`query_deserialize_outcome` give per-item
    #: outcomes (:class:`~lmserde.AsyncSerdeProcessor` does). Without them a failed task fails
    #: every item of its batch.
    reports_item_outcomes: bool = False

    @abstractmethod
    def get_serialize_event_fd(self) -> int:
        """The fd that becomes readable when a serialize task finishes.

        Distinct from the deserialize fd; coalescing (one wake-up may stand for several tasks,
        so a consumer drains every id it waits for). Owned by the processor: never close or read
        it; it stays valid until :meth:`close`.
        """

    @abstractmethod
    def get_deserialize_event_fd(self) -> int:
        """The fd that becomes readable when a deserialize task finishes (as the serialize fd)."""

    @abstractmethod
    def submit_serialize(
        self, src_objs: Sequence[Any], dst_objs: Sequence[MemoryObj], keys: Sequence[ObjectKey]
    ) -> SerdeTaskId:
        """Start serializing ``src_objs[i]`` into ``dst_objs[i]`` under ``keys[i]``; return at once.

        Pre: three sequences of equal length (otherwise the whole task fails, every item, and
        nothing is written); each destination is a byte buffer of at least :meth:`estimate_serialized_size`
        bytes (multi serdes: sources are tuples of slots). Post: a task id unique across both
        directions; the items run in order on one worker; each successful destination is
        narrowed to the bytes written. Completion signals :meth:`get_serialize_event_fd`.
        Raises ``RuntimeError`` after :meth:`close`.
        """

    @abstractmethod
    def query_serialize_result(self, task_id: SerdeTaskId) -> bool | None:
        """``True`` (every item succeeded) or ``False``, exactly once; ``None`` while the task
        runs, for an unknown id and once the result was taken. Never raises."""

    @abstractmethod
    def submit_deserialize(
        self, src_objs: Sequence[MemoryObj], dst_objs: Sequence[Any], keys: Sequence[ObjectKey]
    ) -> SerdeTaskId:
        """Start decoding ``src_objs[i]`` into the pre-allocated ``dst_objs[i]``; return at once.

        Pre and post as :meth:`submit_serialize`, with the directions swapped: sources are stored
        bytes (possibly longer than the frame), destinations are write-locked objects of the
        expected layout (multi serdes: tuples of slots; ``None`` slots are never touched). A
        destination whose item fails is zeroed. Completion signals
        :meth:`get_deserialize_event_fd`.
        """

    @abstractmethod
    def query_deserialize_result(self, task_id: SerdeTaskId) -> bool | None:
        """As :meth:`query_serialize_result`, for deserialize tasks."""

    @abstractmethod
    def estimate_serialized_size(self, layout_desc: Any) -> int:
        """An upper bound on the bytes one serialize item writes for an object of this layout
        (multi serdes: a tuple of layouts). Exact for serdes with an ``EXACT`` size contract.
        Thread-safe; ``ValueError`` for a layout the serde cannot encode."""

    @abstractmethod
    def close(self) -> None:
        """Wait for submitted tasks, stop the workers and close both fds. Idempotent.

        Results not yet taken are dropped; no method but :meth:`close` may be called afterwards
        (submits raise ``RuntimeError``).
        """

    def get_config(self) -> dict[str, Any]:
        """The canonical, JSON-serializable identity of the bytes this processor writes.

        ``{"type": NAME, "format_version": N, "options": {...}}`` with the options that change the
        bytes (``SerdeOption.identity``), sorted by name and normalized to JSON values, as
        attached by :func:`~lmserde.create_serde_processor` through :meth:`set_config`. Two
        processors whose configs are equal write bytes the other can read. Without an attached
        config: ``{"type": <the serde_type attribute or the class name>}``. A chain returns
        ``{"type": "chain", "stages": [...]}``. Returns a fresh copy each call.
        """
        if self._lmserde_config is not None:
            return copy.deepcopy(self._lmserde_config)
        serde_type = self.serde_type
        return {"type": serde_type if isinstance(serde_type, str) else type(self).__name__}

    def set_config(self, config: Mapping[str, Any]) -> None:
        """Attach the identity :meth:`get_config` returns (the registry calls this).

        ``config`` must be JSON-serializable (``ValueError`` otherwise) and is copied.
        """
        try:
            text = json.dumps(dict(config), sort_keys=True, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"a serde config must be JSON-serializable: {exc}") from None
        self._lmserde_config = json.loads(text)

    def authenticates_output(self) -> bool:
        """Whether the serialized bytes authenticate themselves, bound to their object key.

        ``True`` lets a stored-object frame skip its checksum (a damaged or moved object fails
        ``deserialize`` anyway). Default ``False``.
        """
        return False

    def reports_payload_checksum(self) -> bool:
        """Whether the deserializer hashes the payloads it decodes with their bound hasher
        (:mod:`lmserde.frame_checksum`), so that the serde wrapper need not hash large loaded
        payloads itself. Payloads it did not hash are still checked (the wrapper hashes them
        then). Default ``False``."""
        return False

    def serde_pair(self) -> SerdePair | None:
        """The synchronous serializer/deserializer pair this processor runs, if it runs one.

        A serde chain runs the pairs of its stages; a processor that answers ``None`` (the
        default) cannot be a chain stage unless its spec has a ``pair_factory``.
        """
        return None

    def query_serialize_outcome(self, task_id: SerdeTaskId) -> TaskOutcome | None:
        """Like :meth:`query_serialize_result`, with per-item outcomes (only when
        :attr:`reports_item_outcomes`; ``NotImplementedError`` otherwise)."""
        raise NotImplementedError(f"{type(self).__name__} does not report per-item outcomes")

    def query_deserialize_outcome(self, task_id: SerdeTaskId) -> TaskOutcome | None:
        """Like :meth:`query_deserialize_result`, with per-item outcomes (only when
        :attr:`reports_item_outcomes`; ``NotImplementedError`` otherwise)."""
        raise NotImplementedError(f"{type(self).__name__} does not report per-item outcomes")

    def serializer_group_size(self) -> int | None:
        """Group arity of a multi serde; ``None`` for a single-tensor serde."""
        return None

    def deserializer_group_size(self) -> int | None:
        """Group arity of a multi deserializer; ``None`` for a single-tensor serde."""
        return None

    def input_slot_mapping(self) -> tuple[int | None, ...] | None:
        """Parent object-group index feeding each serialize slot (``None`` = absent slot);
        ``None`` for a single-tensor serde."""
        return None

    def output_slot_mapping(self) -> tuple[int | None, ...] | None:
        """Parent object-group index each deserialize slot restores (``None`` = a slot not
        restored); ``None`` for a single-tensor serde."""
        return None


@dataclass
class SerdeConfig:
    """Which serde an adapter uses: ``type`` selects the factory; ``kwargs`` reach it."""

    type: str
    kwargs: dict[str, Any] = field(default_factory=dict)
