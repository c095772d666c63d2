"""The serde configurations a load path decodes, chosen per object by the config its frame names.

A serde wrapper reads with its own serde (the *primary*: what its stores write) and, with the
adapter option ``read_also``, with earlier configurations too: an object whose stored-object
frame names (by config fingerprint) one of them is decoded by that configuration's own
processor, a hit; an object of any other configuration stays a ``config`` miss (storage cannot
make a reader accept a config it did not list). :class:`ConfigReaders` is that list and the
one place that picks a reader for a stored object (:meth:`ConfigReaders.open_deferred`): the
load path sizes its temporaries with :meth:`ConfigReaders.load_bound` (the largest bound of
every reader) and hands each payload to the processor of the reader that opened it.

A serde that writes each object with one of several configurations (``auto``) reads through
the same class: one :class:`ConfigReader` per candidate.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from lmserde.base import SerdeProcessor
from lmserde.containment import describe_exception, must_propagate
from lmserde.keys import ObjectKey
from lmserde.l2.serde.authenticated_frame import AuthenticatedFramer
from lmserde.l2.serde.frame_keys import FrameKeys
from lmserde.l2.serde.hidden_names import NameHider
from lmserde.l2.serde.serde_shape import SerdeShape
from lmserde.l2.serde.stored_frame import FrameRejected, ObjectFramer, stored_config_fingerprint
from lmserde.layout import MemoryLayoutDesc
from lmserde.memory import MemoryObj, TensorMemoryObj
from lmserde.spec import SerdeSizeContract

__all__ = ["ConfigReader", "ConfigReaders", "OpenedPayload", "ReadAlsoSerde", "config_reader",
           "framer_for", "read_also_readers"]

_log = logging.getLogger("lmserde.l2.serde.wrapper")

#: How many (reader, layout) pairs without a bound are remembered, so each is logged once.
_WARNED_LIMIT = 256

#: A ``read_also`` configuration as a wrapper receives it: its processor (owned by the wrapper
#: once built), its serde type and its size contract (what
#: :func:`lmserde.l2.build.build_resolved_serde` returns; any contract reads, since the stored
#: size narrows every load).
ReadAlsoSerde = tuple[SerdeProcessor, str, SerdeSizeContract]

#: What :meth:`ConfigReaders.open_deferred` returns: the reader's index, the payload view and
#: the payload checksum's ``confirm()`` (see :meth:`ObjectFramer.open_deferred`).
OpenedPayload = tuple[int, TensorMemoryObj, Callable[[], None]]


@dataclass(frozen=True)
class ConfigReader:
    """One serde configuration a load path can decode.

    ``label`` names it in metrics and logs (its serde type, unique among the readers);
    ``serde`` is its processor (owned by the wrapper, closed with it); ``framer`` the frame codec
    of its config (``None`` only for an unframed wrapper's one reader); ``shape`` its bounds and
    item views; ``hashes_loads`` whether its deserializer hashes the payload while it decodes.
    """

    label: str
    serde: SerdeProcessor
    framer: ObjectFramer | None
    shape: SerdeShape
    hashes_loads: bool

    @property
    def config_id(self) -> int | None:
        """The config fingerprint its frames carry (``None`` unframed)."""
        return None if self.framer is None else self.framer.config_id


class ConfigReaders:
    """The readers of one load path: the primary first, then the ``read_also`` configurations.

    Raises ``ValueError`` for no reader, several readers of which one does not frame (an
    unframed object names no configuration to choose by), or two readers of one configuration
    (the same fingerprint: which wrote an object could not be told). Thread-safe (immutable;
    the shapes cache their bounds themselves).
    """

    def __init__(self, readers: Sequence[ConfigReader]) -> None:
        readers = tuple(readers)
        if not readers:
            raise ValueError("a load path needs at least one serde configuration to read")
        if len(readers) > 1 and any(r.framer is None for r in readers):
            raise ValueError("reading several serde configurations needs framed objects (the "
                             "frame names the configuration that wrote each object): "
                             "serde_frame must be true")
        by_config: dict[int | None, int] = {}
        for index, reader in enumerate(readers):
            other = by_config.setdefault(reader.config_id, index)
            if other != index:
                raise ValueError(f"serde configuration '{reader.label}' is listed twice (it is "
                                 f"the same configuration as '{readers[other].label}')")
        self._readers = readers
        self._by_config = by_config
        self._warned: set[tuple[int, MemoryLayoutDesc]] = set()  # (reader, layout) without bound

    @property
    def primary(self) -> ConfigReader:
        """The reader of the configuration the wrapper writes."""
        return self._readers[0]

    def __len__(self) -> int:
        return len(self._readers)

    def __getitem__(self, index: int) -> ConfigReader:
        return self._readers[index]

    def __iter__(self) -> Iterator[ConfigReader]:
        return iter(self._readers)

    @property
    def labels(self) -> list[str]:
        """Every reader's label, the primary's first."""
        return [r.label for r in self._readers]

    def index_of(self, config_id: int) -> int | None:
        """The index of the reader of the configuration with fingerprint ``config_id``."""
        return self._by_config.get(config_id)

    def load_bound(self, layout: MemoryLayoutDesc) -> int:
        """The largest payload any reader may find for ``layout``: what a load temporary must
        hold. The primary's estimate raises as it does for a store (``ValueError`` for a layout
        the frame cannot describe); a ``read_also`` estimate that raises leaves that reader out
        for this layout (logged; its objects of this layout are then refused as ``config``)."""
        bound = self.primary.shape.payload_bound(layout)
        for reader in self._readers[1:]:
            try:
                bound = max(bound, reader.shape.payload_bound(layout))
            except BaseException as exc:
                if must_propagate(exc):
                    raise
                self._warn_unbounded(reader, layout, exc)
        return bound

    def _warn_unbounded(self, reader: ConfigReader, layout: MemoryLayoutDesc,
                        exc: BaseException) -> None:
        """Log once per reader and layout (a bounded memory of them) that it has no bound."""
        seen = (id(reader), layout)
        if seen in self._warned:
            return
        if len(self._warned) >= _WARNED_LIMIT:
            self._warned.clear()
        self._warned.add(seen)
        _log.warning("serde wrapper: read_also config '%s' has no bound for %s (its objects of "
                     "this layout are refused as 'config'): %s", reader.label, layout,
                     describe_exception(exc))

    def open_deferred(self, buffer: MemoryObj, key: ObjectKey,
                      layout: MemoryLayoutDesc | None) -> OpenedPayload:
        """Open the frame in ``buffer`` with the reader of the configuration it names (see
        :meth:`~lmserde.l2.serde.stored_frame.ObjectFramer.open_deferred`; ``layout=None`` skips
        the layout check, for offline tools).

        The primary tries first (its fast path costs nothing extra); only an object it refuses
        as ``config`` is looked at again: when its header names a ``read_also`` configuration,
        that reader opens it, with its own bound. Raises :class:`FrameRejected` with the reason
        of the reader that refused it (``config`` for a configuration not listed, or one whose
        bound for this layout cannot be had)."""
        primary = self.primary
        framer = primary.framer
        assert framer is not None, "an unframed reader opens no frames"
        try:
            return (0, *framer.open_deferred(
                buffer, key, layout, self._bound(primary, layout, buffer),
                serde_hashes=primary.hashes_loads))
        except FrameRejected as exc:
            if exc.reason != "config" or len(self._readers) == 1:
                raise
            found = stored_config_fingerprint(buffer, framer.read_header)
            index = None if found is None else self._by_config.get(found)
            if not index:
                raise
        reader = self._readers[index]
        assert reader.framer is not None
        try:
            bound = self._bound(reader, layout, buffer)
        except BaseException as exc:
            if must_propagate(exc):
                raise
            raise FrameRejected("config", f"read_also config '{reader.label}' cannot bound "
                                f"this layout: {describe_exception(exc)}") from exc
        return (index, *reader.framer.open_deferred(buffer, key, layout, bound,
                                                    serde_hashes=reader.hashes_loads))

    @staticmethod
    def _bound(reader: ConfigReader, layout: MemoryLayoutDesc | None, buffer: MemoryObj) -> int:
        """The reader's payload bound for ``layout``; without a layout (offline), the buffer's
        own size bounds it."""
        if layout is None:
            return buffer.get_size()
        return reader.shape.payload_bound(layout)

    def destination(self, index: int, obj: MemoryObj, layout: MemoryLayoutDesc) -> Any:
        """What reader ``index`` deserializes into for the L1 object ``obj`` (its group slot
        views for a multi-output serde); ``ValueError`` when its slots do not fit ``obj``."""
        return self._readers[index].shape.deserialize_item(obj, layout)


def _reports_payload_checksum(serde: SerdeProcessor) -> bool:
    """``serde.reports_payload_checksum()``, ``False`` when that raises (a plugin's processor)."""
    try:
        return serde.reports_payload_checksum() is True
    except BaseException as exc:
        if must_propagate(exc):
            raise
        _log.warning("serde wrapper: reports_payload_checksum raised: %s", describe_exception(exc))
        return False


def framer_for(serde: SerdeProcessor, serde_type: str, frame_keys: FrameKeys | None = None,
               hidden_names: NameHider | None = None) -> ObjectFramer:
    """The frame codec of ``serde``'s configuration (its ``get_config()`` fingerprint): with
    ``frame_keys`` the authenticated frame (version 2, a MAC instead of the checksum; hidden
    names with ``hidden_names``), else version 1 with a payload checksum unless the serde
    authenticates its output. ``ValueError`` when the processor's config cannot be had
    (whatever it raised, contained)."""
    try:
        if frame_keys is not None:
            return AuthenticatedFramer(serde.get_config(), frame_keys, hidden_names)
        return ObjectFramer(serde.get_config(), checksum=not serde.authenticates_output())
    except BaseException as exc:
        if must_propagate(exc):
            raise
        raise ValueError(
            f"serde '{serde_type}': cannot build the stored-object frame from its config: "
            f"{type(exc).__name__}: {exc}"
        ) from exc


def config_reader(serde: SerdeProcessor, serde_type: str, framer: ObjectFramer | None,
                  label: str | None = None) -> ConfigReader:
    """The reader of ``serde`` framed by ``framer`` (``None``: unframed); its deserializer hashes
    the payload while it decodes when the frame has a checksum and the serde reports it can."""
    return ConfigReader(label or serde_type, serde, framer, SerdeShape(serde, serde_type, framer),
                        framer is not None and framer.checksum
                        and _reports_payload_checksum(serde))


def read_also_readers(read_also: Sequence[ReadAlsoSerde], primary: ConfigReader,
                      frame_keys: FrameKeys | None = None,
                      hidden_names: NameHider | None = None,
                      writers: Sequence[ConfigReader] = ()) -> list[ConfigReader]:
    """One reader per ``read_also`` configuration, beside ``primary`` (the wrapper's own), framed
    like it (``frame_keys``, ``hidden_names``: see :func:`framer_for`).

    ``ValueError`` when ``primary`` does not frame (an unframed object names no configuration),
    or a configuration is ``primary``'s own. A label repeated (two ``fp8`` configs with other
    options; ``writers``: the readers of every config the wrapper writes, ``auto``'s candidates)
    is told apart by its fingerprint: ``fp8@<16 hex digits>``."""
    if not read_also:
        return []
    if primary.framer is None:
        raise ValueError("'read_also' needs framed objects (the frame names the serde config "
                         "that wrote each object): remove 'serde_frame: false'")
    readers: list[ConfigReader] = []
    labels = {primary.label, *(w.label for w in writers)}  # (auto: every candidate's)
    for processor, serde_type, _contract in read_also:
        framer = framer_for(processor, serde_type, frame_keys, hidden_names)
        if framer.config_id == primary.config_id:
            raise ValueError(f"'read_also' lists the current serde config ('{primary.label}'): "
                             "list only earlier configs")
        label = serde_type if serde_type not in labels else f"{serde_type}@{framer.config_id:016x}"
        labels.add(label)
        readers.append(config_reader(processor, serde_type, framer, label))
    return readers
