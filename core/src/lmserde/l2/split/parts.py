"""``SplitTierParts``: what the split tier's store path, read path and adapter share."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from lmserde.keys import ObjectKey
from lmserde.l2.contract.task_queues import AdapterTaskQueues
from lmserde.l2.serde.wrapper import SerdeL2AdapterWrapper
from lmserde.l2.split.accounting import SplitTierAccounting
from lmserde.l2.split.generation import derive_v_child_key
from lmserde.l2.split.k_pool import KChildPool
from lmserde.l2.split.manifest import SplitTierManifest
from lmserde.l2.split.placement import SplitSlots

__all__ = ["SplitTierParts"]

_log = logging.getLogger("lmserde.l2.split.adapter")


@dataclass(frozen=True)
class SplitTierParts:
    """One split-tier adapter's pieces: the V side (a serde wrapper storing V halves), the slots,
    the manifest, the K pool in L1, the accounting and the adapter's completion queues."""

    v: SerdeL2AdapterWrapper
    slots: SplitSlots
    manifest: SplitTierManifest
    kpool: KChildPool
    acct: SplitTierAccounting
    queues: AdapterTaskQueues

    def delete_v(self, pairs: Sequence[tuple[ObjectKey, bytes]]) -> None:
        """Delete the V children of ``(key, store generation)`` pairs (errors are logged:
        an orphaned V child is a miss, no K half of its generation exists)."""
        if not pairs:
            return
        try:
            self.v.delete([derive_v_child_key(k, g) for k, g in pairs])
        except Exception as exc:
            _log.warning("split tier: deleting %d V children failed: %s: %s", len(pairs),
                         type(exc).__name__, exc)
