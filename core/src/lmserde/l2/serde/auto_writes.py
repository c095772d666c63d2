"""The ``auto`` serde inside a serde wrapper: one stored-object configuration per candidate.

``auto`` is not a processor of its own. The wrapper receives the candidates' processors (built
from the ``candidates`` option, :mod:`lmserde.l2.build`) and an
:class:`~lmserde.adaptive.AutoPolicy`; :class:`AutoWrites` turns them into what the two paths
need:

- a :class:`~lmserde.l2.serde.store_path.StoreWriter` per candidate: the store path asks the
  policy which one stores each object (``AutoPolicy.decide``, once per object), serializes the
  task's objects in one group per candidate chosen and frames each object with its candidate's
  config fingerprint, so every stored object says which candidate wrote it;
- a :class:`~lmserde.l2.serde.read_configs.ConfigReader` per candidate, first in the wrapper's
  :class:`~lmserde.l2.serde.read_configs.ConfigReaders` (before any ``read_also`` config): the
  load path decodes each object with the candidate its frame names, exactly as it decodes an
  object of a ``read_also`` config;
- the observers that feed the policy: each candidate's group of a successful store (its
  serialize seconds, KV and stored bytes, its share of the inner store seconds by stored bytes)
  and each decoded load (deserialize seconds, inner load seconds).
  The first store and the first load of each candidate are not measured: they pay one-time
  costs (the processor's first call, the first L1 temporaries and files), which would make the
  candidate the warm-up measures first look slow until it left the window.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from lmserde.adaptive import AutoPolicy
from lmserde.base import SerdeProcessor
from lmserde.l2.serde.frame_keys import FrameKeys
from lmserde.l2.serde.hidden_names import NameHider
from lmserde.l2.serde.read_configs import ConfigReader, ReadAlsoSerde, config_reader, framer_for
from lmserde.l2.serde.store_writer import StoreWriter
from lmserde.spec import SerdeSizeContract

__all__ = ["AutoWrites"]


@dataclass(frozen=True)
class AutoWrites:
    """The ``auto`` serde as a wrapper is given it.

    ``candidates``: the processor, serde type and size contract of every candidate after the
    first, in the policy's order (the first is the wrapper's own ``serde``); ``policy``: the
    decision policy over all of them (``policy.candidates[i]`` names candidate ``i``). The
    wrapper owns every processor and closes them with itself.
    """

    candidates: tuple[ReadAlsoSerde, ...]
    policy: AutoPolicy
    _warmed: set[tuple[str, int]] = field(default_factory=set, init=False, repr=False)

    def __post_init__(self) -> None:
        if len(self.policy.candidates) != 1 + len(self.candidates):
            raise ValueError(f"the auto policy has {len(self.policy.candidates)} candidates, the "
                             f"wrapper {1 + len(self.candidates)}")

    @staticmethod
    def check_adapter(framed: bool, reports_sizes: bool) -> None:
        """``ValueError`` unless objects are framed (the frame names the candidate that wrote
        each) on an adapter that reports stored sizes (loads size their buffers by them)."""
        if not framed or not reports_sizes:
            raise ValueError("serde 'auto' needs framed objects (the frame names the candidate "
                             "that wrote each) on an adapter that reports stored object sizes "
                             "(fs, memory, redis, s3)")

    def observe_store(self, index: int, raw_bytes: int, stored_bytes: int,
                      encode_seconds: float, store_seconds: float) -> None:
        """The objects of a successful store that candidate ``index`` wrote (a
        :data:`~lmserde.l2.serde.store_path.StoreObserver`); called on the wrapper's poll
        thread only."""
        if self._first("store", index):
            return
        self.policy.observe_store(index, raw_bytes, stored_bytes, encode_seconds, store_seconds)

    def observe_load(self, index: int, raw_bytes: int, stored_bytes: int,
                     decode_seconds: float, load_seconds: float) -> None:
        """Objects of reader ``index`` decoded (a
        :data:`~lmserde.l2.serde.load_path.LoadObserver`; an index past the candidates is a
        ``read_also`` config: it measures the adapter only); poll thread only."""
        if self._first("load", index):
            return
        self.policy.observe_load(index, raw_bytes, stored_bytes, decode_seconds, load_seconds)

    def _first(self, direction: str, index: int) -> bool:
        """Whether this is candidate ``index``'s first ``direction`` (not measured)."""
        if (direction, index) in self._warmed:
            return False
        self._warmed.add((direction, index))
        return True

    @property
    def size_contract_of_all(self) -> SerdeSizeContract | None:
        """``UPPER_BOUND`` when a further candidate may write less than its estimate."""
        if any(c is SerdeSizeContract.UPPER_BOUND for _, _, c in self.candidates):
            return SerdeSizeContract.UPPER_BOUND
        return None

    def readers(self, serde: SerdeProcessor, serde_type: str, frame_keys: FrameKeys | None = None,
                hidden_names: NameHider | None = None) -> list[ConfigReader]:
        """One framed reader per candidate, labelled with its policy name (``serde`` is the
        first candidate's processor, ``serde_type`` its type), framed like the wrapper's own
        (``frame_keys``, ``hidden_names``: see :func:`~lmserde.l2.serde.read_configs.framer_for`).
        ``ValueError`` when a candidate's config cannot be had."""
        names = [c.name for c in self.policy.candidates]
        processors = [(serde, serde_type), *((p, t) for p, t, _ in self.candidates)]
        return [config_reader(p, t, framer_for(p, t, frame_keys, hidden_names), label=name)
                for (p, t), name in zip(processors, names)]

    def writers(self, readers: Sequence[ConfigReader], first_contract: SerdeSizeContract,
                head_last: bool) -> list[StoreWriter]:
        """A store writer per candidate over its reader's frame and shape; ``head_last``: the
        inner adapter writes heads last (a frame that can defer its head is then finished
        while it writes)."""
        contracts = [first_contract, *(c for _, _, c in self.candidates)]
        return [StoreWriter(r.serde, r.label, contract, r.framer,
                            head_last and r.framer is not None and r.framer.defers_heads,
                            r.shape)
                for r, contract in zip(readers, contracts)]
