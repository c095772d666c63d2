"""``StoragePlacementMode``: where an L2 tier puts the K and V groups of a KV object.

A serde declares its placement on its spec (:attr:`lmserde.SerdeSpec.placement`); the adapter
builder (:func:`lmserde.l2.create_l2_adapter`) reads it there, and only there, to choose between
the serde wrapper and the split tier. Re-exported by :mod:`lmserde.spec`, ``lmserde`` and
``lmserde.l2``.
"""

from __future__ import annotations

import enum

__all__ = ["StoragePlacementMode"]


class StoragePlacementMode(enum.Enum):
    """Where the groups of a KV object go.

    ``KV_TOGETHER`` (the default): the serde writes one stored object holding the whole object
    (every group its slot mapping names) to L2, through the serde wrapper.
    ``KV_SPLIT_TIER``: the serde stores V alone (its slot mapping leaves K absent, like
    ``(None, 1)``); K stays in L1 under a child key of its own and V goes to L2 under another,
    through the split tier (:class:`lmserde.l2.SplitTierL2Adapter`).
    """

    KV_TOGETHER = "kv_together"
    KV_SPLIT_TIER = "kv_split_tier"
