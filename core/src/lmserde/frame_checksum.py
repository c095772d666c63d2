"""The stored-object frame's payload checksum, for serdes that compute it in their own pass.

The serde wrapper frames every stored object with a checksum of its payload (the serde's bytes;
definition in :mod:`lmserde.l2.serde.payload_checksum`, format in
``docs/formats/stored-object.md``). By default the wrapper hashes the payload itself, overlapped
with the adapter's write on store and the serde's decode on load: one more pass over bytes far
larger than the CPU caches. A serde whose own pass writes or reads every payload byte can have
the checksum computed in that pass instead, while each block is in the L1 cache::

    def serialize(self, src, dst, key):
        hasher = payload_hasher(dst)      # None: not wanted (or no kernel); copy as usual
        if hasher is not None:
            hasher.copy_in(data)          # a copy of the whole output, hashed in the copy
            # or, block by block:  write out[a:b], then hasher.update(out[a:b])
        ...

    class MyDeserializer(Deserializer):
        reports_payload_checksum = True   # the wrapper then does not hash large loads itself

        def deserialize(self, src, dst, key):
            hasher = payload_hasher(src)
            if hasher is not None:
                hasher.copy_out(out)      # or read src block by block, hasher.update(each)

The hasher :func:`payload_hasher` returns is **bound to the payload's memory**: it hashes only
that range's bytes, from its start, in order (any other piece breaks it), so the checksum it
yields is always one of the bytes that are there — a serde cannot hand the wrapper a number it
computed some other way. On store the wrapper uses the digest when the hasher covered exactly
the bytes written; on load, for a payload over one checksum segment (smaller ones are checked
before decoding), when it covered the whole payload, and it compares the digest with the
frame's once the decode has returned: a mismatch zeroes the destination and makes the key a
miss, as for any damaged object. A hasher not used, broken, or stopped short is not an error:
the wrapper hashes the payload itself then.

The kernels are ``lmserde._checksum_copy`` (C, built with the core: xxhash's reference XXH3 with
its AVX-512, AVX2 or SSE2 variant chosen at run time, fused with a copy that streams large
destinations past the cache). Native code can feed a bound hasher from inside its own loop
without the GIL through :func:`hasher_c_api` and :meth:`PayloadHasher.c_hasher` (lmserde-fp8
does). Without the kernel :func:`payload_hasher` returns ``None`` (a fused pass has no advantage
then: serdes copy as before and the wrapper hashes); :func:`copy_with_checksum` and an unbound
:class:`PayloadHasher` still give the right values through the ``xxhash`` package.
"""

from __future__ import annotations

import ctypes
from typing import Any

import torch
import xxhash

from lmserde.memory import MemoryObj, TensorMemoryObj

_kernel: Any
try:
    import lmserde._checksum_copy as _kernel
except ImportError:  # built without a compiler, or LMSERDE_CORE_NO_EXTENSION=1
    _kernel = None

__all__ = [
    "CHECKSUM_SEGMENT_BYTES",
    "FramedPayload",
    "PayloadHasher",
    "checksum_bytes",
    "copy_with_checksum",
    "checksum_kernel",
    "hasher_c_api",
    "payload_hasher",
    "tensor_bytes",
    "xxh3_of_bytes",
]

#: Payloads longer than this are checksummed as segments of this size.
CHECKSUM_SEGMENT_BYTES = 4 << 20


def checksum_kernel() -> str | None:
    """The SIMD level of the compiled checksum kernel (``"avx512"``, ``"avx2"``, ``"sse2"`` or
    ``"portable"``), or ``None`` when lmserde was installed without it."""
    return None if _kernel is None else str(_kernel.simd_level())


def _check_bytes(name: str, data: torch.Tensor) -> None:
    if (data.dtype != torch.uint8 or data.dim() != 1 or not data.is_contiguous()
            or data.device.type != "cpu"):
        raise ValueError(f"{name} must be a contiguous 1-D uint8 CPU tensor")


def tensor_bytes(data: torch.Tensor) -> memoryview:
    """A read-only view of a contiguous 1-D uint8 CPU tensor's bytes, without a copy and without
    NumPy (which torch does not require). The view keeps the tensor alive."""
    if data.dtype != torch.uint8 or data.dim() != 1 or not data.is_contiguous():
        raise ValueError("tensor_bytes needs a contiguous 1-D uint8 tensor")
    n = data.numel()
    if n == 0:
        return memoryview(b"")
    array = (ctypes.c_uint8 * n).from_address(data.data_ptr())
    array._owner = data  # type: ignore[attr-defined]  # keeps the storage alive with the view
    return memoryview(array).toreadonly()


def _xxh3_bytes(data: torch.Tensor) -> int:
    """XXH3-64 (seed 0) of a checked byte tensor, without a copy; releases the GIL."""
    n = data.numel()
    if _kernel is not None:  # one segment as long as the data: the plain XXH3-64
        return int(_kernel.copy_checksum(0, data.data_ptr() if n else 0, n, max(n, 256)))
    hasher = xxhash.xxh3_64()  # the streaming hasher releases the GIL; the one-shot call may not
    hasher.update(tensor_bytes(data))
    return hasher.intdigest()


def xxh3_of_bytes(data: torch.Tensor) -> int:
    """XXH3-64 (seed 0) of a contiguous 1-D uint8 CPU tensor's bytes (the checksum of a payload
    of at most one segment, and of each segment of a longer one); releases the GIL."""
    _check_bytes("data", data)
    return _xxh3_bytes(data)


def _combine(digests: list[int]) -> int:
    return xxhash.xxh3_64_intdigest(b"".join(d.to_bytes(8, "little") for d in digests))


def _checksum_with_xxhash(data: torch.Tensor) -> int:
    n, seg = data.numel(), CHECKSUM_SEGMENT_BYTES
    return _combine_segments([_xxh3_bytes(data[i:i + seg]) for i in range(0, n, seg)] or
                             [_xxh3_bytes(data)])


def _combine_segments(digests: list[int]) -> int:
    """The payload checksum from its segments' XXH3-64s (one segment: that digest)."""
    return digests[0] if len(digests) == 1 else _combine(digests)


def checksum_bytes(data: torch.Tensor) -> int:
    """The payload checksum of a contiguous 1-D uint8 CPU tensor's bytes, on the calling thread
    (the GIL released while hashing). :func:`lmserde.l2.serde.payload_checksum.payload_checksum`
    spreads long payloads over threads instead."""
    _check_bytes("data", data)
    if _kernel is None:
        return _checksum_with_xxhash(data)
    n = data.numel()
    return int(_kernel.copy_checksum(0, data.data_ptr() if n else 0, n, CHECKSUM_SEGMENT_BYTES))


def copy_with_checksum(dst: torch.Tensor, src: torch.Tensor) -> int:
    """Copy ``src`` into ``dst`` and return the payload checksum of the bytes copied.

    Both are contiguous 1-D uint8 CPU tensors of the same length that do not overlap. With the
    native kernel this is one pass (each 1 KiB block hashed right after it is copied; a
    destination of 2 MiB or more written with streaming stores); without it, a copy and then a
    hash. Releases the GIL.
    """
    _check_bytes("dst", dst)
    _check_bytes("src", src)
    n = src.numel()
    if dst.numel() != n:
        raise ValueError(f"copy_with_checksum: dst has {dst.numel()} bytes, src {n}")
    if n == 0:
        return checksum_bytes(src)
    if _kernel is None:
        ctypes.memmove(dst.data_ptr(), src.data_ptr(), n)
        return _checksum_with_xxhash(dst)
    return int(_kernel.copy_checksum(dst.data_ptr(), src.data_ptr(), n, CHECKSUM_SEGMENT_BYTES))


class PayloadHasher:
    """The payload checksum of bytes fed in order, in pieces of any size: for code that produces
    (or consumes) a payload block by block and hashes each block while it is in the cache.
    :meth:`digest` is the checksum of all the bytes fed so far. Not thread-safe: feed one hasher
    from one thread at a time (concurrent feeding corrupts its state).

    ``PayloadHasher()`` hashes whatever it is fed. The hasher :func:`payload_hasher` returns is
    bound to a payload's memory instead (``bound`` is that range, internal): it accepts only the
    range's bytes, from its start, in order, and is broken by anything else (:attr:`valid`).
    """

    def __init__(self, *, bound: tuple[int, int] | None = None) -> None:
        self._total = 0
        self._bound = bound
        if bound is not None and _kernel is None:
            raise RuntimeError("a bound payload hasher needs lmserde's checksum kernel")
        if _kernel is not None:
            base, limit = bound if bound is not None else (0, 0)
            self._native: Any = _kernel.hasher_new(CHECKSUM_SEGMENT_BYTES, base, limit)
        else:
            self._native = None
            self._digests: list[int] = []
            self._filled = 0  # bytes fed into the current segment
            self._state = xxhash.xxh3_64()

    def update(self, data: torch.Tensor) -> None:
        """Feed the next bytes (a contiguous 1-D uint8 CPU tensor; read during the call only)."""
        _check_bytes("data", data)
        n = data.numel()
        if self._native is not None:
            if n:
                _kernel.hasher_update(self._native, data.data_ptr(), n)
            return
        self._total += n
        pos = 0
        while pos < n:
            if self._filled == CHECKSUM_SEGMENT_BYTES:  # a full segment is followed by more
                self._digests.append(int(self._state.intdigest()))
                self._state.reset()
                self._filled = 0
            take = min(n - pos, CHECKSUM_SEGMENT_BYTES - self._filled)
            self._state.update(tensor_bytes(data[pos:pos + take]))
            self._filled += take
            pos += take

    def _copy(self, other: torch.Tensor, into: bool) -> None:
        _check_bytes("the other buffer", other)
        if self._bound is None:
            raise ValueError("copy_in/copy_out need a hasher bound to a payload")
        _kernel.hasher_copy(self._native, other.data_ptr() if other.numel() else 0,
                            other.numel(), into)

    def copy_in(self, src: torch.Tensor) -> None:
        """Copy ``src`` to the start of the bound payload and take the checksum from the copy
        (one fused pass). Only as the hasher's first and only use; otherwise it breaks it."""
        self._copy(src, True)

    def copy_out(self, dst: torch.Tensor) -> None:
        """Copy the first ``dst.numel()`` bytes of the bound payload into ``dst`` and take their
        checksum from the copy (one fused pass); first and only use, as :meth:`copy_in`."""
        self._copy(dst, False)

    @property
    def nbytes(self) -> int:
        """Bytes fed so far."""
        if self._native is not None:
            return int(_kernel.hasher_state(self._native)[0])
        return self._total

    @property
    def valid(self) -> bool:
        """False once a bound hasher was fed anything but the next bytes of its range."""
        return self._native is None or bool(_kernel.hasher_state(self._native)[1])

    def c_hasher(self) -> Any:
        """The native hasher (a capsule named ``lmserde.payload_hasher``) for the C API's
        ``update``, or ``None`` without the checksum kernel."""
        return self._native

    def digest(self) -> int:
        """The payload checksum of everything fed so far."""
        if self._native is not None:
            return int(_kernel.hasher_digest(self._native))
        return _combine_segments([*self._digests, int(self._state.intdigest())])


def hasher_c_api() -> Any:
    """The checksum kernel's C API capsule (``lmserde.payload_hasher_api``: a version number, 1,
    then ``void update(void *hasher, const void *data, size_t n)``; append-only), or ``None``
    without the kernel."""
    return None if _kernel is None else _kernel.C_API


class FramedPayload(TensorMemoryObj):
    """The byte buffer the serde wrapper hands a serde for a framed payload (the region after the
    frame header; on load, the payload read). It owns the bound hasher :func:`payload_hasher`
    returns; serdes use that function, not this class."""

    _hasher: PayloadHasher | None = None

    def forget_hasher(self) -> None:
        """Start a new use of this buffer: the next :meth:`payload_hasher` is a fresh hasher (the
        serde wrapper reuses the views of its pooled temporaries)."""
        self._hasher = None

    def payload_hasher(self) -> PayloadHasher:
        """The hasher bound to this buffer's bytes (one per use of the buffer)."""
        if self._hasher is None:
            raw = self.raw_data
            self._hasher = PayloadHasher(bound=(raw.data_ptr(), raw.numel()))
        return self._hasher

    def verified_checksum(self, nbytes: int) -> int | None:
        """The checksum of bytes ``[0, nbytes)`` when this buffer's bound hasher covered exactly
        them and was never broken; ``None`` otherwise (the caller hashes them then)."""
        hasher = self._hasher
        if hasher is None or not hasher.valid or hasher.nbytes != nbytes:
            return None
        return hasher.digest()


def payload_hasher(buffer: MemoryObj | Any) -> PayloadHasher | None:
    """The hasher bound to ``buffer``'s bytes when ``buffer`` is a payload the serde wrapper
    frames with a checksum and the checksum kernel is built; ``None`` otherwise. Feed it the
    payload's bytes in order as the serde writes (store) or reads (load) them, or use its fused
    :meth:`~PayloadHasher.copy_in` / :meth:`~PayloadHasher.copy_out`."""
    if _kernel is None or not isinstance(buffer, FramedPayload):
        return None
    return buffer.payload_hasher()
