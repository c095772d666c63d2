"""``L2StoreResult``: the outcome of one store task, an ``int`` for upstream compatibility."""

from __future__ import annotations

__all__ = ["L2StoreResult"]


class L2StoreResult(int):
    """``L2StoreResult(success, bytes)``: the byte count on success, ``-1`` on failure.

    ``bytes`` is what the adapter stored (serialized bytes behind a serde wrapper) and must be
    ``>= 0``. ``bytes_transferred()`` is ``0`` for a failure.
    """

    def __new__(cls, success: bool, bytes_: int = 0) -> L2StoreResult:
        nbytes = int(bytes_)
        if nbytes < 0:
            raise ValueError(f"L2StoreResult bytes must be >= 0, got {bytes_!r}")
        return super().__new__(cls, nbytes if success else -1)

    def is_successful(self) -> bool:
        return int(self) >= 0

    def bytes_transferred(self) -> int:
        return max(int(self), 0)

    def __repr__(self) -> str:
        if self.is_successful():
            return f"L2StoreResult(True, {int(self)})"
        return "L2StoreResult(False, 0)"
