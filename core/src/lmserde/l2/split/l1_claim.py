"""One split-tier adapter per L1 cache: the K halves live in that L1 and its manifest names one L2.

:func:`claim_l1` records the open split-tier adapter of an :class:`~lmserde.l1.L1Manager`
(weakly) and refuses a second one while the first is open; :func:`release_l1` frees it on close.
"""

from __future__ import annotations

import threading
import weakref
from typing import Protocol

from lmserde.l1.manager import L1Manager
from lmserde.l2.split.placement import SplitTierConfigError

__all__ = ["claim_l1", "release_l1", "check_l1_free"]


class _Adapter(Protocol):
    @property
    def closed(self) -> bool: ...


_ACTIVE_LOCK = threading.Lock()
#: The open split-tier adapter of each L1Manager (one at most).
_ACTIVE: weakref.WeakKeyDictionary[L1Manager, _Adapter] = weakref.WeakKeyDictionary()


def _refuse_if_taken(l1: L1Manager) -> None:
    current = _ACTIVE.get(l1)
    if current is not None and not current.closed:
        raise SplitTierConfigError(
            "split-tier placement needs exactly one L2 adapter per L1 cache: this L1Manager "
            "already has an open split-tier adapter (close it first, or use a serde that "
            "stores K and V together)"
        )


def check_l1_free(l1: L1Manager) -> None:
    """:class:`~lmserde.l2.split.placement.SplitTierConfigError` when ``l1`` has an open
    split-tier adapter (nothing is claimed)."""
    with _ACTIVE_LOCK:
        _refuse_if_taken(l1)


def claim_l1(l1: L1Manager, adapter: _Adapter) -> None:
    """Make ``adapter`` the split-tier adapter of ``l1``, or raise as :func:`check_l1_free`."""
    with _ACTIVE_LOCK:
        _refuse_if_taken(l1)
        _ACTIVE[l1] = adapter


def release_l1(l1: L1Manager, adapter: _Adapter) -> None:
    """Free ``l1`` if ``adapter`` holds it (no-op otherwise)."""
    with _ACTIVE_LOCK:
        if _ACTIVE.get(l1) is adapter:
            del _ACTIVE[l1]
