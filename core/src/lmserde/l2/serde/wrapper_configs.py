"""The serde configurations one serde wrapper writes and reads, built once at construction.

A wrapper writes with its serde (or, for serde ``auto``, with each of its candidates:
:mod:`~lmserde.l2.serde.auto_writes`) and reads those configurations first, then its
``read_also`` ones (:mod:`~lmserde.l2.serde.read_configs`). :func:`wrapper_configs` builds the
frame codec, the :class:`~lmserde.l2.serde.read_configs.ConfigReaders` and the store path's
:class:`~lmserde.l2.serde.store_path.StoreWriter` list from them, and refuses what cannot work
(``ValueError``), before the wrapper opens anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lmserde.base import SerdeProcessor
from lmserde.l2.contract.interface import L2AdapterInterface
from lmserde.l2.serde.auto_writes import AutoWrites
from lmserde.l2.serde.frame_keys import FrameKeys
from lmserde.l2.serde.hidden_names import NameHider
from lmserde.l2.serde.read_configs import (
    ConfigReaders,
    ReadAlsoSerde,
    config_reader,
    framer_for,
    read_also_readers,
)
from lmserde.l2.serde.store_writer import StoreWriter
from lmserde.l2.serde.stored_frame import ObjectFramer
from lmserde.spec import SerdeSizeContract

__all__ = ["WrapperConfigs", "resolve_size_contract", "wrapper_configs"]


def resolve_size_contract(serde: SerdeProcessor, serde_type: str) -> SerdeSizeContract:
    """The processor's declared size contract, else the one registered for ``serde_type``,
    else ``UPPER_BOUND`` (the conservative contract)."""
    if serde.size_contract is not None:
        return serde.size_contract
    try:
        from lmserde.registry import get_serde_size_contract

        return get_serde_size_contract(serde_type)
    except Exception:  # unknown type: the conservative contract
        return SerdeSizeContract.UPPER_BOUND


@dataclass(frozen=True)
class WrapperConfigs:
    """``framer``: the frame codec of the wrapper's (first) config, ``None`` unframed;
    ``readers``: every config loads decode, the ``written`` configs stores write first;
    ``writers``: one store writer per written config."""

    framer: ObjectFramer | None
    readers: ConfigReaders
    written: int
    writers: list[StoreWriter]

    def event_fds(self, inner: L2AdapterInterface) -> tuple[list[int], list[int]]:
        """The deserialize event fds of every reader but the first, and the serialize event
        fds of every writer but the first; ``ValueError`` unless they, the first serde's two
        and ``inner``'s store and load fds are all distinct."""
        first = self.readers.primary.serde
        read_fds = [r.serde.get_deserialize_event_fd() for r in list(self.readers)[1:]]
        write_fds = [w.serde.get_serialize_event_fd() for w in self.writers[1:]]
        watched = {first.get_serialize_event_fd(), first.get_deserialize_event_fd(),
                   inner.get_store_event_fd(), inner.get_load_event_fd(), *read_fds, *write_fds}
        if len(watched) != 4 + len(read_fds) + len(write_fds):
            raise ValueError(
                "the serde's serialize/deserialize fds and the inner adapter's store/load fds "
                "must be four distinct file descriptors"
                + (", and each further serde's event fd another one" if read_fds else ""))
        return read_fds, write_fds


def wrapper_configs(serde: SerdeProcessor, serde_type: str, contract: SerdeSizeContract, *,
                    frame: bool, frame_keys: FrameKeys | None, hidden_names: NameHider | None,
                    read_also: Sequence[ReadAlsoSerde], auto: AutoWrites | None,
                    reports_sizes: bool, backend: str, head_last: bool) -> WrapperConfigs:
    """The configurations of a wrapper of ``serde`` (of ``serde_type`` and ``contract``; the
    first candidate's for ``auto``) over an adapter named ``backend`` that reports stored
    sizes or not and writes heads last or not (a frame that can defer its head is then hashed
    while the adapter writes). ``ValueError`` for a frame key without framing, ``read_also``
    without stored sizes, and what :class:`ConfigReaders` refuses."""
    if frame_keys is not None and not frame:
        raise ValueError("a frame key authenticates the stored-object frame: it needs a "
                         "framed adapter (drop 'serde_frame: false')")
    if read_also and not reports_sizes:
        raise ValueError(
            f"'read_also' needs an adapter that reports stored object sizes (fs, memory, "
            f"redis, s3): '{backend}' does not, and a load must size its buffer to "
            "the object whichever config wrote it")
    framer = framer_for(serde, serde_type, frame_keys, hidden_names) if frame else None
    if auto is None:
        own = [config_reader(serde, serde_type, framer)]
        writers = [StoreWriter(serde, serde_type, contract, framer,
                               head_last and framer is not None and framer.defers_heads,
                               own[0].shape)]
    else:
        own = auto.readers(serde, serde_type, frame_keys, hidden_names)
        writers = auto.writers(own, contract, head_last)
    readers = ConfigReaders([*own, *read_also_readers(read_also, own[0], frame_keys,
                                                      hidden_names, own)])
    return WrapperConfigs(framer, readers, len(own), writers)
