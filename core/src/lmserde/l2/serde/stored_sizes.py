"""Asking an inner adapter for the stored sizes of keys, one key's failure not hiding the others'."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from lmserde.containment import describe_exception, must_propagate
from lmserde.keys import ObjectKey
from lmserde.l2.contract.inner_delegation import adapter_reports_sizes
from lmserde.l2.contract.interface import L2AdapterInterface

__all__ = ["examine_stored_sizes"]

_log = logging.getLogger("lmserde.l2.serde.wrapper")


def examine_stored_sizes(inner: L2AdapterInterface, keys: Sequence[ObjectKey]
                         ) -> tuple[dict[ObjectKey, int], set[ObjectKey]]:
    """The stored sizes ``inner`` reports for ``keys`` (``{}`` when it does not report sizes),
    and the keys whose size could not be had because the adapter raised (for the batch, then for
    the key alone): those may well exist, where a key left out of the sizes without raising is
    not stored. When asking for the batch raises, each key is asked alone. Never raises (except
    Ctrl-C on the main thread). May wait on the network: never call it on a caller's thread."""
    keys = list(keys)
    if not adapter_reports_sizes(inner):
        return {}, set()
    try:
        return dict(inner.get_object_sizes(keys)), set()
    except BaseException as exc:
        if must_propagate(exc):
            raise
        _log.warning("serde wrapper: get_object_sizes raised: %s; asking key by key",
                     describe_exception(exc))
    sizes: dict[ObjectKey, int] = {}
    unknown: set[ObjectKey] = set()
    for key in keys:
        try:
            sizes.update(inner.get_object_sizes([key]))
        except BaseException as exc:
            if must_propagate(exc):
                raise
            unknown.add(key)  # this key's size stays unknown
    return sizes, unknown
