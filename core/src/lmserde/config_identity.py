"""Canonical JSON values for serde identity configs (what :meth:`SerdeProcessor.get_config` holds)."""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from typing import Any

__all__ = ["canonical_value"]


def canonical_value(value: Any) -> Any:
    """``value`` as a JSON-native value, the same for equal configs.

    Enums become their value, torch dtypes (and any other object) their ``str``, bytes their hex,
    tuples and lists lists, sets sorted lists, mappings dicts with string keys. Non-finite floats
    become their ``repr`` (JSON has no NaN or infinity); ``-0.0`` becomes ``0.0``; integral
    floats stay floats.
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, enum.Enum):
        return canonical_value(value.value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return repr(value)
        return value + 0.0
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, Mapping):
        return {str(k): canonical_value(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [canonical_value(v) for v in value]
    if isinstance(value, (set, frozenset)):
        items = [canonical_value(v) for v in value]
        return sorted(items, key=repr)
    return str(value)
