"""Combining CRC-32s (zlib's IEEE polynomial): the CRC of ``A + B`` from the CRCs of ``A`` and ``B``.

This is what lets a payload be hashed in chunks on several threads (``zlib.crc32`` releases the
GIL on large buffers) and still give exactly ``zlib.crc32`` of the whole payload.
"""

from __future__ import annotations

from functools import lru_cache

__all__ = ["crc32_combine"]

_POLY = 0xEDB88320  # reflected x^32 + x^26 + ... + 1
_X0 = 1 << 31  # the polynomial "1" in the reflected representation


def _mulmod(a: int, b: int) -> int:
    """Product of two polynomials modulo the CRC polynomial (reflected bit order)."""
    product = 0
    mask = _X0
    while a:
        if a & mask:
            product ^= b
            a ^= mask
        mask >>= 1
        b = (b >> 1) ^ _POLY if b & 1 else b >> 1
    return product


def _powers_of_x() -> list[int]:
    # table[n] = x^(2^n) mod P; x^1 is bit 30 in the reflected representation. The sequence
    # repeats with period 32 for the CRC-32 polynomial, so 32 entries cover every length.
    table = [1 << 30]
    for _ in range(31):
        table.append(_mulmod(table[-1], table[-1]))
    return table


_X_POW_2N = _powers_of_x()


def _shift_operator(nbytes: int) -> int:
    """x^(8 * nbytes) mod P: appending ``nbytes`` zero bytes multiplies a CRC state by this."""
    result = _X0
    n, k = nbytes, 3  # 8 * nbytes = nbytes << 3
    while n:
        if n & 1:
            result = _mulmod(_X_POW_2N[k % 32], result)
        n >>= 1
        k += 1
    return result


@lru_cache(maxsize=1024)
def _shift_tables(nbytes: int) -> tuple[tuple[int, ...], ...]:
    """Nibble tables of "multiply by the shift operator of ``nbytes``": 8 lookups per CRC."""
    # The operator is linear over GF(2): its image of each single bit, then of each nibble value.
    # Bit 31 is x^0 in the reflected representation; each lower bit is one more factor of x.
    single = [0] * 32
    image = _shift_operator(nbytes)
    for bit in range(31, -1, -1):
        single[bit] = image
        image = (image >> 1) ^ _POLY if image & 1 else image >> 1
    tables = []
    for nibble in range(8):
        table = [0] * 16
        for value in range(1, 16):
            low = value & -value
            table[value] = table[value ^ low] ^ single[4 * nibble + low.bit_length() - 1]
        tables.append(tuple(table))
    return tuple(tables)


def crc32_combine(crc1: int, crc2: int, len2: int) -> int:
    """CRC-32 of ``A + B`` from ``crc1 = crc32(A)``, ``crc2 = crc32(B)`` and ``len2 = len(B)``."""
    if len2 < 0:
        raise ValueError(f"len2 must be >= 0, got {len2}")
    if len2 == 0:
        return crc1
    t0, t1, t2, t3, t4, t5, t6, t7 = _shift_tables(len2)
    return (
        t0[crc1 & 15] ^ t1[(crc1 >> 4) & 15] ^ t2[(crc1 >> 8) & 15] ^ t3[(crc1 >> 12) & 15]
        ^ t4[(crc1 >> 16) & 15] ^ t5[(crc1 >> 20) & 15] ^ t6[(crc1 >> 24) & 15]
        ^ t7[(crc1 >> 28) & 15] ^ crc2
    )
