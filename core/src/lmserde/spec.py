"""Serde specs: what a plugin publishes under the ``lmcache.serde`` entry-point group.

``SerdePair`` (:mod:`lmserde.serde_pair`), ``SerdeSizeContract`` (:mod:`lmserde.size_contract`)
and ``StoragePlacementMode`` (:mod:`lmserde.storage_placement`) live below the serde contracts
and are re-exported here. This module sits above
:mod:`lmserde.processor`: :meth:`SerdeSpec.create_processor` runs a pair in an
:class:`~lmserde.AsyncSerdeProcessor`, imported when it is first called so that importing a spec
(listing plugins) imports neither torch nor a thread pool.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lmserde.config_identity import canonical_value
from lmserde.containment import describe_exception, must_propagate
from lmserde.data_kind import ALL_DATA_KINDS, DataKind
from lmserde.options import SerdeOption, validate_options
from lmserde.plugin_registry import spec_from_entry_object
from lmserde.serde_pair import SerdePair, SerdePairFactory
from lmserde.size_contract import SerdeSizeContract
from lmserde.storage_placement import StoragePlacementMode

if TYPE_CHECKING:
    from lmserde.base import SerdeProcessor

__all__ = ["SerdeSizeContract", "SerdeSpec", "SerdeFactory", "SerdePair", "SerdePairFactory",
           "StoragePlacementMode"]

SerdeFactory = Callable[[dict[str, Any]], "SerdeProcessor"]


@dataclass(frozen=True)
class SerdeSpec:
    """A serde as a plugin publishes it.

    How it is built — exactly one of:

    * ``pair_factory(options)`` returns a :class:`SerdePair`. Core builds the processor
      (:meth:`create_processor`: an :class:`~lmserde.AsyncSerdeProcessor` with the ``max_workers``
      option, 1 when the spec declares none) and runs the same pair as a chain stage, so a chain
      of such serdes is one processor. This is the way for new serdes.
    * ``factory(options)`` returns a :class:`~lmserde.SerdeProcessor` (upstream style, and the
      way for a processor that is not a serializer/deserializer pair). In a chain, such a serde's
      processor is built and its :meth:`~lmserde.SerdeProcessor.serde_pair` taken (refused with a
      clear error when it has none).

    With declared ``options`` the registry validates and coerces the config kwargs first and the
    builder receives every declared option (defaults filled in); with ``options=None`` the kwargs
    reach it untouched (upstream behaviour, for plain factories). ``lossy`` says whether a round
    trip may change values.

    Composition (checked when a chain is configured): ``consumes`` is what the serde accepts as
    input (default: every :class:`~lmserde.DataKind`, so unknown serdes stay unrestricted) and
    ``produces`` what it writes (default ``BYTES``); ``consumes_hint`` is a sentence added to the
    error when a chain feeds it something else. Identity: ``format_version`` is the version of the
    plugin's byte format — bump it whenever the bytes written for the same options change.

    Placement: ``placement`` says where an L2 tier puts the groups of a KV object
    (:class:`~lmserde.StoragePlacementMode`). ``KV_TOGETHER`` (the default) stores the whole
    object through the serde. ``KV_SPLIT_TIER`` is for a serde that stores V alone: its slot
    mappings leave K absent (two slots, one present, like ``(None, 1)``), and an adapter
    configured with it keeps K in L1 and stores V through the serde (the split tier). The
    adapter builder decides from this declaration alone; the slot mapping is checked against it
    when the adapter is built. Not part of the serde's identity: stored objects do not change
    with it. A chain cannot hold a ``KV_SPLIT_TIER`` serde.

    Native code: a serde with a compiled codec sets ``native_status`` to a function returning what
    this process runs, in the vocabulary every plugin shares: ``backend`` (``"native"`` or
    ``"torch"``), ``simd`` (the instruction level of the native code, e.g. ``"avx2"``,
    ``"scalar"``; ``None`` when not built), ``built`` (bool) and, on the torch backend, a
    ``reason``. ``lmserde info`` and ``lmserde plugins --load --json`` show it
    (:meth:`describe_native`).
    """

    factory: SerdeFactory | None = None
    description: str = ""
    options: Sequence[SerdeOption] | None = ()
    size_contract: SerdeSizeContract = SerdeSizeContract.UPPER_BOUND
    lossy: bool = False
    consumes: frozenset[DataKind] = ALL_DATA_KINDS
    produces: DataKind = DataKind.BYTES
    consumes_hint: str = ""
    format_version: int = 1
    native_status: Callable[[], Mapping[str, Any]] | None = None
    pair_factory: SerdePairFactory | None = None
    placement: StoragePlacementMode = StoragePlacementMode.KV_TOGETHER

    def __post_init__(self) -> None:
        if (self.factory is None) == (self.pair_factory is None):
            raise TypeError(
                "SerdeSpec needs exactly one of factory (options -> SerdeProcessor) and "
                "pair_factory (options -> SerdePair)"
            )
        consumes = frozenset(self.consumes)
        if not consumes or not all(isinstance(k, DataKind) for k in consumes):
            raise TypeError("SerdeSpec.consumes must be a non-empty set of lmserde.DataKind")
        object.__setattr__(self, "consumes", consumes)
        if not isinstance(self.produces, DataKind):
            raise TypeError("SerdeSpec.produces must be an lmserde.DataKind")
        if isinstance(self.format_version, bool) or not isinstance(self.format_version, int) \
                or self.format_version < 1:
            raise TypeError(
                f"SerdeSpec.format_version must be an int >= 1, got {self.format_version!r}"
            )
        if not isinstance(self.placement, StoragePlacementMode):
            raise TypeError(
                f"SerdeSpec.placement must be an lmserde.StoragePlacementMode (KV_TOGETHER or "
                f"KV_SPLIT_TIER), got {self.placement!r}"
            )

    def identity_config(self, serde_type: str, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The canonical identity of a processor built from validated ``kwargs``.

        ``{"type": serde_type, "format_version": N, "options": {...}}``: the declared options
        with ``identity=True`` (every kwarg when ``options`` is ``None``), sorted by name, values
        normalized to JSON (enums to their value, torch dtypes to ``str``, bytes to hex, tuples
        and sets to lists).
        """
        if self.options is None:
            names = sorted(str(k) for k in kwargs)
        else:
            names = sorted(o.name for o in self.options if o.identity and o.name in kwargs)
        options = {name: canonical_value(kwargs[name]) for name in names}
        return {"type": serde_type, "format_version": self.format_version, "options": options}

    def describe_native(self) -> dict[str, Any] | None:
        """``native_status()`` as a plain dict; ``None`` for a serde without native code.

        Plugin code: whatever it raises (anything but a main-thread ``KeyboardInterrupt``) is
        reported as ``{"error": "..."}``, never raised.
        """
        if self.native_status is None:
            return None
        try:
            return {str(k): v for k, v in dict(self.native_status()).items()}
        except BaseException as exc:  # plugin code
            if must_propagate(exc):
                raise
            return {"error": describe_exception(exc)}

    def validate(self, serde_type: str, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The kwargs the factory will receive, or ``ValueError`` for invalid ones."""
        if self.options is None:
            return dict(kwargs)
        return validate_options(serde_type, self.options, kwargs)

    def create_pair(self, options: dict[str, Any]) -> SerdePair:
        """The pair ``pair_factory`` builds from validated ``options`` (``TypeError`` when the
        spec has no pair factory, or it returns something other than a :class:`SerdePair` whose
        serializer has ``serialize`` and ``estimate_serialized_size`` and whose deserializer has
        ``deserialize``). Runs plugin code: callers contain what it raises."""
        if self.pair_factory is None:
            raise TypeError("this SerdeSpec builds processors (factory), not pairs")
        pair = self.pair_factory(options)
        if not isinstance(pair, SerdePair):
            raise TypeError(
                f"pair_factory must return an lmserde.SerdePair, got {type(pair).__name__}")
        for role, obj, methods in (("serializer", pair.serializer,
                                    ("serialize", "estimate_serialized_size")),
                                   ("deserializer", pair.deserializer, ("deserialize",))):
            missing = [m for m in methods if not callable(getattr(obj, m, None))]
            if missing:
                raise TypeError(
                    f"pair_factory returned a SerdePair whose {role} is "
                    f"{type(obj).__name__} {obj!r:.80}, which has no {', '.join(missing)}; "
                    f"expected an lmserde.{role.capitalize()}")
        return pair

    def workers(self, options: Mapping[str, Any]) -> int:
        """The worker threads ``options`` ask for: ``max_workers``, else the declared default of
        that option, else 1."""
        if "max_workers" in options:
            return int(options["max_workers"])
        declared = next((o for o in self.options or () if o.name == "max_workers"), None)
        return int(declared.default) if declared is not None else 1

    def close_timeout(self, options: Mapping[str, Any]) -> float:
        """The seconds ``close()`` waits for running calls: ``close_timeout_s`` (see
        :func:`~lmserde.close_timeout_option`), else that option's declared default, else
        :data:`~lmserde.options.DEFAULT_CLOSE_TIMEOUT_S`."""
        from lmserde.options import DEFAULT_CLOSE_TIMEOUT_S

        if "close_timeout_s" in options:
            return float(options["close_timeout_s"])
        declared = next((o for o in self.options or () if o.name == "close_timeout_s"), None)
        return float(declared.default) if declared is not None else DEFAULT_CLOSE_TIMEOUT_S

    def create_processor(self, serde_type: str, options: dict[str, Any]) -> SerdeProcessor:
        """The processor for validated ``options``: ``factory(options)``, or the one place core
        runs a pair: an :class:`~lmserde.AsyncSerdeProcessor` over :meth:`create_pair` with
        :meth:`workers` threads and a :meth:`close_timeout` bound, named ``serde_type``. Runs
        plugin code: callers contain what it raises (:func:`~lmserde.create_serde_processor`
        does)."""
        if self.factory is not None:
            return self.factory(options)
        from lmserde.processor import AsyncSerdeProcessor

        pair = self.create_pair(options)
        return AsyncSerdeProcessor(pair.serializer, pair.deserializer, self.workers(options),
                                   serde_type=serde_type,
                                   close_timeout_s=self.close_timeout(options))

    def processor_factory(self, serde_type: str) -> SerdeFactory:
        """An upstream-style factory ``kwargs -> SerdeProcessor`` for this spec under the name
        ``serde_type`` (what a plugin exports as ``create_<type>_processor``): validated kwargs
        (every declared option present) in, :meth:`create_processor` out."""

        def create(kwargs: dict[str, Any]) -> SerdeProcessor:
            return self.create_processor(serde_type, kwargs)

        create.__name__ = create.__qualname__ = f"create_{serde_type}_processor"
        create.__doc__ = (f"The ``{serde_type}`` processor core builds from its spec for "
                          "validated kwargs.")
        return create

    @classmethod
    def from_entry_object(cls, obj: Any) -> SerdeSpec:
        """Accept a ``SerdeSpec`` or a plain upstream-style ``factory(kwargs)`` callable."""
        return spec_from_entry_object(cls, obj, "a serde")
