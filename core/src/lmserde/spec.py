"""Serde specs: what a plugin publishes under the ``lmcache.serde`` entry-point group."""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lmserde.config_identity import canonical_value
from lmserde.containment import describe_exception, must_propagate
from lmserde.data_kind import ALL_DATA_KINDS, DataKind
from lmserde.options import SerdeOption, validate_options

if TYPE_CHECKING:
    from lmserde.base import SerdeProcessor

__all__ = ["SerdeSizeContract", "SerdeSpec", "SerdeFactory"]

SerdeFactory = Callable[[dict[str, Any]], "SerdeProcessor"]


class SerdeSizeContract(enum.Enum):
    """How ``serialize``'s output size relates to ``estimate_serialized_size``.

    ``EXACT``: every successful serialize writes exactly the estimate. ``UPPER_BOUND``: it may write
    less, so the L2 adapter must report stored sizes (``get_object_sizes``) for loads to work.
    """

    EXACT = "exact"
    UPPER_BOUND = "upper_bound"


@dataclass(frozen=True)
class SerdeSpec:
    """A serde as a plugin publishes it.

    ``factory(kwargs)`` builds a :class:`~lmserde.SerdeProcessor`. With declared ``options`` the
    registry validates and coerces the config kwargs first and the factory receives every declared
    option (defaults filled in); with ``options=None`` the kwargs reach the factory untouched
    (upstream behaviour, for plain factories). ``lossy`` says whether a round trip may change values.

    Composition (checked when a chain is configured): ``consumes`` is what the serde accepts as
    input (default: every :class:`~lmserde.DataKind`, so unknown serdes stay unrestricted) and
    ``produces`` what it writes (default ``BYTES``); ``consumes_hint`` is a sentence added to the
    error when a chain feeds it something else. Identity: ``format_version`` is the version of the
    plugin's byte format — bump it whenever the bytes written for the same options change.

    Native code: a serde with a compiled codec sets ``native_status`` to a function returning what
    this process runs, in the vocabulary every plugin shares: ``backend`` (``"native"`` or
    ``"torch"``), ``simd`` (the instruction level of the native code, e.g. ``"avx2"``,
    ``"scalar"``; ``None`` when not built), ``built`` (bool) and, on the torch backend, a
    ``reason``. ``lmserde info`` and ``lmserde plugins --load --json`` show it
    (:meth:`describe_native`).
    """

    factory: SerdeFactory
    description: str = ""
    options: Sequence[SerdeOption] | None = ()
    size_contract: SerdeSizeContract = SerdeSizeContract.UPPER_BOUND
    lossy: bool = False
    consumes: frozenset[DataKind] = ALL_DATA_KINDS
    produces: DataKind = DataKind.BYTES
    consumes_hint: str = ""
    format_version: int = 1
    native_status: Callable[[], Mapping[str, Any]] | None = None

    def __post_init__(self) -> None:
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

    @classmethod
    def from_entry_object(cls, obj: Any) -> SerdeSpec:
        """Accept a ``SerdeSpec`` or a plain upstream-style ``factory(kwargs)`` callable."""
        if isinstance(obj, SerdeSpec):
            return obj
        if callable(obj):
            return cls(factory=obj, description=(obj.__doc__ or "").strip().split("\n")[0],
                       options=None)
        raise TypeError(
            f"a serde entry point must name a SerdeSpec or a factory callable, got "
            f"{type(obj).__name__}"
        )
