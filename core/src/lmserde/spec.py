"""Serde specs: what a plugin publishes under the ``lmcache.serde`` entry-point group."""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

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
    """

    factory: SerdeFactory
    description: str = ""
    options: Sequence[SerdeOption] | None = ()
    size_contract: SerdeSizeContract = SerdeSizeContract.UPPER_BOUND
    lossy: bool = False

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
