"""``KeyPins``: counted lookup locks and deletes deferred to the last unlock."""

from __future__ import annotations

from lmserde.l2 import KeyPins
from lmserde.testing import adapter_key

A, B, C = adapter_key(1), adapter_key(2), adapter_key(3)


def test_a_delete_of_a_pinned_key_waits_for_its_last_unlock() -> None:
    pins = KeyPins()
    pins.pin(A)
    pins.pin(A)
    assert pins.defer_pinned([A, B]) == [B]  # B is not pinned: delete it now
    assert pins.is_deferred(A) and not pins.is_deferred(B)
    assert pins.unpin([A]) == []  # one lock left
    assert pins.is_pinned(A)
    assert pins.unpin([A, C]) == [A]  # the last lock: the deferred delete is due; C is unknown
    assert not pins.is_pinned(A) and not pins.is_deferred(A)
    assert (pins.pinned_count, pins.deferred_count) == (0, 0)


def test_an_unpin_without_a_deferred_delete_frees_nothing() -> None:
    pins = KeyPins()
    pins.pin(A)
    assert pins.unpin([A]) == []
    assert pins.unpin([A]) == []  # more unlocks than locks are ignored


def test_a_cancelled_or_cleared_delete_never_becomes_due() -> None:
    pins = KeyPins()
    pins.pin(A)
    pins.pin(B)
    assert pins.defer_pinned([A, B]) == []
    pins.cancel_deferred(A)  # stored again meanwhile
    assert pins.deferred_count == 1
    assert pins.unpin([A, B]) == [B]
    pins.pin(C)
    pins.defer_pinned([C])
    pins.clear()
    assert (pins.pinned_count, pins.deferred_count) == (0, 0)
    assert pins.unpin([C]) == []
