"""The closest known name to a mistyped one: the one "Did you mean" of every lmserde message.

Unknown options (:func:`lmserde.options.validate_options`) and unknown serde or L2 adapter types
(:meth:`lmserde.plugin_registry.SpecRegistry.unknown_error`) both word their suggestion here.
Imports nothing from lmserde.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["closest_match", "did_you_mean"]


def closest_match(word: str, candidates: Iterable[str]) -> str | None:
    """The candidate closest to ``word`` (``difflib``'s ratio of at least 0.6), or ``None``."""
    close = difflib.get_close_matches(str(word), [str(c) for c in candidates], n=1)
    return close[0] if close else None


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """``" Did you mean 'x'?"`` for the closest candidate, ``""`` when none is close."""
    close = closest_match(word, candidates)
    return f" Did you mean '{close}'?" if close is not None else ""
