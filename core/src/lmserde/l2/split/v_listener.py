"""The split tier's listener on its V side: V children's events become logical keys' events."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import Any

from lmserde.keys import ObjectKey
from lmserde.l2.split.placement import parse_component_key

__all__ = ["VSideListener", "logical_keys_of"]


def logical_keys_of(v_keys: Sequence[ObjectKey]) -> list[int | ObjectKey]:
    """Logical key of each V child key (positions of other keys hold their index)."""
    out: list[int | ObjectKey] = []
    for i, key in enumerate(v_keys):
        parsed = parse_component_key(key)
        out.append(parsed[0] if parsed is not None and parsed[1] == "v" else i)
    return out


class VSideListener:
    """Registered on the V side's adapter: stored and accessed V children reach
    ``notify(event, keys[, sizes])`` with their logical keys (other keys are skipped); deleted
    or evicted ones go to ``on_removed(v_keys)`` (they invalidate their keys).

    Holds both callbacks weakly (bound methods of the split-tier adapter, which owns the V side
    this listener is registered on): once the adapter is gone, events are dropped.
    """

    def __init__(self, notify: Callable[..., None],
                 on_removed: Callable[[list[ObjectKey]], None]) -> None:
        self._notify = weakref.WeakMethod(notify)  # type: ignore[arg-type]
        self._on_removed = weakref.WeakMethod(on_removed)  # type: ignore[arg-type]

    def _call(self, ref: weakref.WeakMethod[Any], *args: Any) -> None:
        method = ref()
        if method is not None:
            method(*args)

    def on_l2_keys_stored(self, keys: list[ObjectKey], sizes: list[int]) -> None:
        pairs = [(k, s) for k, s in zip(logical_keys_of(keys), sizes) if isinstance(k, ObjectKey)]
        if pairs:
            self._call(self._notify, "on_l2_keys_stored", [k for k, _ in pairs],
                       [s for _, s in pairs])

    def on_l2_keys_accessed(self, keys: list[ObjectKey]) -> None:
        logical = [k for k in logical_keys_of(keys) if isinstance(k, ObjectKey)]
        if logical:
            self._call(self._notify, "on_l2_keys_accessed", logical)

    def on_l2_keys_deleted(self, keys: list[ObjectKey]) -> None:
        self._call(self._on_removed, keys)
