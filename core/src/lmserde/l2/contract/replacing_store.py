"""Replacing stores: an adapter that can replace a key's existing object instead of skipping it.

The L2 contract (LMCache's) skips a store whose key already has an object: the first writer
wins. Behind the serde wrapper that rule keeps damage forever: a damaged object, or one written
under another serde configuration or key, makes every later store of the key a no-op, so only a
load (which finds and removes the damaged object) followed by another store heals it. An adapter
that offers :meth:`ReplacingStoreAdapter.replace_existing_on_store` can be switched, once, to
replacing stores: from then on a store of a key that has an object writes the new object in its
place, atomically (a reader sees the old object or the new one, never a mix of them), and reports
the bytes it wrote. The serde wrapper switches its inner adapter when it frames objects: one store
of the genuine object then heals a key, and a config change costs one round of misses.

A store of the same bytes a key already holds is then written again; under LMCache a store of an
existing key is rare (a lookup comes first), so what this costs is small next to a tier that
cannot heal. An adapter without the capability keeps skipping: damaged objects are still removed
by the load that finds them.
"""

from __future__ import annotations

from typing import Any, Protocol

from lmserde.l2.contract.inner_delegation import probe_adapter

__all__ = ["ReplacingStoreAdapter", "enable_replacing_stores"]


class ReplacingStoreAdapter(Protocol):
    """An adapter whose stores can replace existing objects (see the module docstring)."""

    def replace_existing_on_store(self) -> bool:
        """Switch this adapter to replacing stores for the rest of its life; returns whether it
        did (``False``: this instance cannot replace, and keeps skipping existing keys).

        After it returned ``True``, every store (``submit_store_task`` and, where offered,
        ``submit_store_task_head_last``) of a key that already has an object replaces that object
        atomically and reports the bytes written; concurrent stores of one key leave one
        complete object of one of them. Called before any task is submitted; idempotent."""
        ...


def enable_replacing_stores(adapter: Any) -> bool:
    """Switch ``adapter`` to replacing stores when it offers them; whether it did. An adapter
    without :meth:`~ReplacingStoreAdapter.replace_existing_on_store` keeps skipping; whatever the
    call raises is contained (see :func:`~lmserde.l2.contract.inner_delegation.probe_adapter`)
    and counts as "no"."""
    return probe_adapter(adapter, "replace_existing_on_store")
