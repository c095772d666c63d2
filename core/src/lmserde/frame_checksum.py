"""The stored-object frame's payload checksum, for serdes that compute it in their own pass.

The serde wrapper frames every stored object with a checksum of its payload (the serde's bytes;
definition in :mod:`lmserde.l2.serde.payload_checksum`, format in
``docs/formats/stored-object.md``). By default the wrapper hashes the payload itself, overlapped
with the adapter's write on store and the serde's decode on load: one more pass over bytes far
larger than the CPU caches. A serde whose own pass reads or writes every payload byte can compute
the checksum in that pass instead, while each block is in the L1 cache, and report it::

    def serialize(self, src, dst, key):
        ...
        if wants_payload_checksum(dst):
            report_payload_checksum(dst, n, copy_with_checksum(out[:n], data))
        else:
            ...  # the plain copy

    class MyDeserializer(Deserializer):
        reports_payload_checksum = True  # tells the wrapper not to hash loads itself

        def deserialize(self, src, dst, key):
            if wants_payload_checksum(src):  # report the checksum of the whole payload read
                report_payload_checksum(src, src.get_size(), copy_with_checksum(out, payload))

On store the wrapper uses a report that covers exactly the bytes written; on load it compares
the report with the frame's checksum once the decode has returned, and a mismatch zeroes the
destination and makes the key a miss, as for any damaged object. A missing report, or one that
covers another number of bytes, is not an error: the wrapper then hashes the payload itself. A
wrong report cannot produce a wrong hit: the stored object, or the decoded one, becomes a miss.

The kernels are ``lmserde._checksum_copy`` (C, built with the core: xxhash's reference XXH3 with
its AVX-512, AVX2 or SSE2 variant chosen at run time, fused with a copy that streams large
destinations past the cache). Without that module :func:`wants_payload_checksum` is ``False``
(a fused pass has no advantage without the kernel, so serdes copy as before and the wrapper
hashes), and :func:`copy_with_checksum` and :class:`PayloadHasher` still return the right values
through the ``xxhash`` package.
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
    "report_payload_checksum",
    "wants_payload_checksum",
    "xxh3_of_bytes",
]

#: Payloads longer than this are checksummed as segments of this size.
CHECKSUM_SEGMENT_BYTES = 4 << 20

_U64 = (1 << 64) - 1


def checksum_kernel() -> str | None:
    """The SIMD level of the compiled checksum kernel (``"avx512"``, ``"avx2"``, ``"sse2"`` or
    ``"portable"``), or ``None`` when lmserde was installed without it."""
    return None if _kernel is None else str(_kernel.simd_level())


def _check_bytes(name: str, data: torch.Tensor) -> None:
    if (data.dtype != torch.uint8 or data.dim() != 1 or not data.is_contiguous()
            or data.device.type != "cpu"):
        raise ValueError(f"{name} must be a contiguous 1-D uint8 CPU tensor")


def _xxh3_bytes(data: torch.Tensor) -> int:
    """XXH3-64 (seed 0) of a checked byte tensor, without a copy; releases the GIL."""
    n = data.numel()
    if _kernel is not None:  # one segment as long as the data: the plain XXH3-64
        return int(_kernel.copy_checksum(0, data.data_ptr() if n else 0, n, max(n, 256)))
    hasher = xxhash.xxh3_64()
    if n:
        array = (ctypes.c_uint8 * n).from_address(data.data_ptr())
        hasher.update(memoryview(array))
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
    """The payload checksum of bytes fed in order, in pieces of any size: for a serde that
    produces (or consumes) its payload block by block and hashes each block while it is in the
    cache. :meth:`digest` is the checksum of all the bytes fed so far. Not thread-safe; one per
    payload.

    A native extension can feed it from inside its own loop, without the GIL, through the
    checksum kernel's C API: :meth:`c_hasher` and :func:`hasher_c_api` (see
    ``core/csrc/checksum_copy.c``; lmserde-fp8 does that).
    """

    def __init__(self) -> None:
        self._total = 0
        if _kernel is not None:
            self._native: Any = _kernel.hasher_new(CHECKSUM_SEGMENT_BYTES)
        else:
            self._native = None
            self._digests: list[int] = []
            self._filled = 0  # bytes fed into the current segment
            self._state = xxhash.xxh3_64()

    def update(self, data: torch.Tensor) -> None:
        """Feed the next bytes (a contiguous 1-D uint8 CPU tensor; read during the call only)."""
        _check_bytes("data", data)
        n = data.numel()
        self._total += n
        if n == 0:
            return
        if self._native is not None:
            _kernel.hasher_update(self._native, data.data_ptr(), n)
            return
        pos = 0
        while pos < n:
            if self._filled == CHECKSUM_SEGMENT_BYTES:  # a full segment is followed by more
                self._digests.append(int(self._state.intdigest()))
                self._state.reset()
                self._filled = 0
            take = min(n - pos, CHECKSUM_SEGMENT_BYTES - self._filled)
            array = (ctypes.c_uint8 * take).from_address(data.data_ptr() + pos)
            self._state.update(memoryview(array))
            self._filled += take
            pos += take

    def add_fed(self, nbytes: int) -> None:
        """Account for ``nbytes`` fed through the C API (see :meth:`c_hasher`)."""
        self._total += nbytes

    @property
    def nbytes(self) -> int:
        """Bytes fed so far (those fed through the C API once :meth:`add_fed` counted them)."""
        return self._total

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
    then ``void update(void *hasher, const void *data, size_t n)``), or ``None`` without the
    kernel."""
    return None if _kernel is None else _kernel.C_API


class FramedPayload(TensorMemoryObj):
    """The byte buffer the serde wrapper hands a serde for a framed payload (the region after the
    frame header; on load, the payload read). It carries the serde's checksum report; serdes
    use :func:`wants_payload_checksum` and :func:`report_payload_checksum`, not this class."""

    _checksum_report: tuple[int, int] | None = None

    def reported_checksum(self, nbytes: int) -> int | None:
        """The checksum a serde reported for exactly ``nbytes`` bytes of this buffer, if any."""
        report = self._checksum_report
        if report is None or report[0] != nbytes:
            return None
        return report[1]


def wants_payload_checksum(buffer: MemoryObj | Any) -> bool:
    """Whether ``buffer`` is a payload the serde wrapper frames with a checksum, and the checksum
    kernel is built: then a serde that reads or writes all of it can compute the checksum in the
    same pass (:func:`copy_with_checksum`, :class:`PayloadHasher`) and report it."""
    return _kernel is not None and isinstance(buffer, FramedPayload)


def report_payload_checksum(buffer: MemoryObj | Any, nbytes: int, checksum: int) -> None:
    """Report ``checksum``, the payload checksum of bytes ``[0, nbytes)`` of ``buffer``: on store
    the bytes the serializer wrote (``nbytes`` its return value), on load the bytes the
    deserializer read (``nbytes`` the buffer's ``get_size()``). A no-op for any other buffer. A
    later report replaces an earlier one."""
    if isinstance(buffer, FramedPayload):
        buffer._checksum_report = (int(nbytes), int(checksum) & _U64)
