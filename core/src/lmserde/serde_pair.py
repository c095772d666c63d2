"""``SerdePair``: a synchronous serializer and the deserializer that reads its bytes.

What a :class:`~lmserde.SerdeSpec` ``pair_factory`` returns and what
:meth:`~lmserde.SerdeProcessor.serde_pair` gives back. Re-exported by :mod:`lmserde.spec` and by
``lmserde``. Imports its field types for type checkers only, so it stays importable without torch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lmserde.multi import MultiDeserializer, MultiSerializer
    from lmserde.transforms import Deserializer, Serializer

__all__ = ["SerdePair", "SerdePairFactory"]


@dataclass(frozen=True)
class SerdePair:
    """A synchronous serializer and the deserializer that reads its bytes (no threads, no fds).

    What a :class:`SerdeSpec` ``pair_factory`` returns: core runs the pair behind an
    :class:`~lmserde.AsyncSerdeProcessor`, or as one stage of a chain.
    """

    serializer: Serializer | MultiSerializer
    deserializer: Deserializer | MultiDeserializer


SerdePairFactory = Callable[[dict[str, Any]], SerdePair]
