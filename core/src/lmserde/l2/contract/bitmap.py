"""``Bitmap``: the per-key hit/success result of lookups and loads."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

__all__ = ["Bitmap"]


class Bitmap:
    """``n`` bits, all zero initially; bit ``i`` belongs to key ``i`` of a batch.

    ``count_leading_ones()`` is the usable prefix of a lookup or load: one cleared bit in the
    middle truncates it. Bits outside ``[0, n)`` raise ``IndexError``.
    """

    __slots__ = ("_bits", "_n")

    def __init__(self, n: int) -> None:
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise ValueError(f"Bitmap size must be an int >= 0, got {n!r}")
        self._n = n
        self._bits = 0

    @classmethod
    def from_bools(cls, values: Iterable[bool]) -> Bitmap:
        flags = list(values)
        bitmap = cls(len(flags))
        for i, flag in enumerate(flags):
            if flag:
                bitmap._bits |= 1 << i
        return bitmap

    @classmethod
    def full(cls, n: int) -> Bitmap:
        """``n`` bits, all set."""
        bitmap = cls(n)
        bitmap._bits = (1 << n) - 1
        return bitmap

    def _check(self, i: int) -> None:
        if not 0 <= i < self._n:
            raise IndexError(f"bit {i} out of range for a Bitmap of {self._n} bits")

    def set(self, i: int) -> None:
        self._check(i)
        self._bits |= 1 << i

    def clear(self, i: int) -> None:
        self._check(i)
        self._bits &= ~(1 << i)

    def test(self, i: int) -> bool:
        self._check(i)
        return bool(self._bits >> i & 1)

    def gather(self, indices: Iterable[int]) -> Bitmap:
        """A new bitmap whose bit ``j`` is this bitmap's bit ``indices[j]``."""
        picked = list(indices)
        out = Bitmap(len(picked))
        for j, i in enumerate(picked):
            if self.test(i):
                out._bits |= 1 << j
        return out

    def count_leading_ones(self) -> int:
        """Number of consecutive set bits starting at bit 0."""
        inverted = ~self._bits & ((1 << self._n) - 1)
        if inverted == 0:
            return self._n
        return (inverted & -inverted).bit_length() - 1

    def count(self) -> int:
        """Number of set bits."""
        return self._bits.bit_count()

    def set_indices(self) -> list[int]:
        return [i for i in range(self._n) if self._bits >> i & 1]

    def to_list(self) -> list[bool]:
        return [bool(self._bits >> i & 1) for i in range(self._n)]

    def __len__(self) -> int:
        return self._n

    def __iter__(self) -> Iterator[bool]:
        return iter(self.to_list())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Bitmap):
            return NotImplemented
        return self._n == other._n and self._bits == other._bits

    def __hash__(self) -> int:
        return hash((self._n, self._bits))

    def __and__(self, other: Bitmap) -> Bitmap:
        if len(other) != self._n:
            raise ValueError(f"cannot combine Bitmaps of {self._n} and {len(other)} bits")
        out = Bitmap(self._n)
        out._bits = self._bits & other._bits
        return out

    def __repr__(self) -> str:
        return "Bitmap(" + "".join("1" if b else "0" for b in self.to_list()) + ")"
