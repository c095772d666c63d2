"""Per-key outcomes of L1 manager calls (upstream-compatible names)."""

from __future__ import annotations

import enum

__all__ = ["L1Error"]


class L1Error(enum.Enum):
    """What happened to one key of an L1 call.

    ``KEY_NOT_WRITABLE``: the key already exists (or, for ``mode="update"``, does not).
    ``OUT_OF_MEMORY``: the reservation would exceed the capacity; nothing else was disturbed.
    ``KEY_NOT_EXIST``: no such object (or it belongs to another tag). ``KEY_IN_WRONG_STATE``:
    the object exists but its lock state does not allow the call.
    """

    SUCCESS = "success"
    KEY_NOT_WRITABLE = "key_not_writable"
    OUT_OF_MEMORY = "out_of_memory"
    KEY_NOT_EXIST = "key_not_exist"
    KEY_IN_WRONG_STATE = "key_in_wrong_state"
