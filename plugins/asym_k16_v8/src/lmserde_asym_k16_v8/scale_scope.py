"""``ScaleScope``: how many quantization scales a V payload carries (header field ``scale_scope``)."""

from __future__ import annotations

import enum

__all__ = ["SUPPORTED_SCALE_SCOPES", "ScaleScope", "parse_scale_scope"]


class ScaleScope(enum.IntEnum):
    """Scale granularity; the integer is the value written in the header."""

    PER_TENSOR = 0
    PER_LAYER_HEAD = 1
    PER_PAGE_HEAD = 2
    EXTERNAL = 3


SUPPORTED_SCALE_SCOPES: tuple[ScaleScope, ...] = (ScaleScope.PER_TENSOR,)
"""Scopes this package can encode and decode; the header codec itself reads every scope."""


def parse_scale_scope(value: str | ScaleScope) -> ScaleScope:
    """Resolve a scope name (``"PER_TENSOR"``) or member; the scope must also be supported here.

    Raises ``ValueError("Unknown ScaleScope 'x'. Valid: ...")`` for a name that is no scope, and a
    ``ValueError`` naming the supported scopes for a scope this package does not implement.
    """
    if isinstance(value, ScaleScope):
        scope = value
    else:
        try:
            scope = ScaleScope[str(value)]
        except KeyError:
            valid = ", ".join(s.name for s in ScaleScope)
            raise ValueError(f"Unknown ScaleScope {value!r}. Valid: {valid}") from None
    if scope not in SUPPORTED_SCALE_SCOPES:
        supported = ", ".join(s.name for s in SUPPORTED_SCALE_SCOPES)
        raise ValueError(
            f"ScaleScope {scope.name} is not supported by asym_k16_v8; supported: {supported}"
        )
    return scope
