"""``identity``: an exact byte copy. The baseline in benchmarks and the smallest complete serde.

Wire format: the source object's logical bytes (``get_size()``), unchanged. EXACT size contract.

Behind the serde wrapper's frame, both directions compute the frame's payload checksum in the
copy itself (the payload's bound hasher: one pass instead of a copy plus a hash), when lmserde's
checksum kernel is built.
"""

from __future__ import annotations

import ctypes
from typing import Any

import torch

from lmserde.base import Deserializer, Serializer
from lmserde.builtin_plugins import BUILTIN_FACTS
from lmserde.frame_checksum import PayloadHasher, checksum_kernel, payload_hasher
from lmserde.install_hints import SERDE_GROUP
from lmserde.keys import ObjectKey
from lmserde.layout import MemoryLayoutDesc
from lmserde.memory import MemoryObj, as_byte_tensor
from lmserde.options import processor_options
from lmserde.spec import SerdePair, SerdeSizeContract, SerdeSpec

__all__ = ["IdentitySerializer", "IdentityDeserializer", "IDENTITY_SPEC"]


def _copy_bytes(dst: torch.Tensor, src: torch.Tensor) -> None:
    """Copy between two same-sized contiguous CPU byte tensors.

    ``ctypes.memmove`` is a single-threaded memcpy that releases the GIL; torch's ``copy_`` would
    wake its OpenMP pool for every object, which costs more than it saves at chunk sizes.
    """
    if dst.device.type == "cpu" and src.device.type == "cpu":
        ctypes.memmove(dst.data_ptr(), src.data_ptr(), src.numel())
    else:
        dst.copy_(src)


def _check_room(role: str, have: int, need: int) -> None:
    """``ValueError`` when the ``role`` buffer's ``have`` bytes cannot hold ``need``."""
    if have < need:
        raise ValueError(f"identity serde: {role} buffer too small ({have} < {need} bytes)")


def _copy_payload(out: torch.Tensor, data: torch.Tensor, hasher: PayloadHasher | None, *,
                  storing: bool) -> None:
    """``out[:] = data``, where one side is the framed payload that ``hasher`` is bound to (the
    destination when ``storing``, else the source): the hasher does the copy and hashes it in
    passing when there is one and the other side is on the CPU; otherwise a plain copy."""
    plain = data if storing else out
    if hasher is not None and plain.device.type == "cpu":
        if storing:
            hasher.copy_in(data)
        else:
            hasher.copy_out(out)
    elif data.numel():
        _copy_bytes(out, data)


class IdentitySerializer(Serializer):
    """Copies the source's bytes into the destination (hashing them in the copy when the wrapper
    wants the payload checksum)."""

    def serialize(self, src: MemoryObj, dst: MemoryObj, key: ObjectKey) -> int:
        data = as_byte_tensor(src)
        n = data.numel()
        _check_room("destination", dst.get_size(), n)
        _copy_payload(as_byte_tensor(dst)[:n], data, payload_hasher(dst), storing=True)
        return n

    def estimate_serialized_size(self, layout_desc: MemoryLayoutDesc) -> int:
        return layout_desc.nbytes


class IdentityDeserializer(Deserializer):
    """Copies ``dst.get_size()`` bytes from the source into the destination (hashing them in the
    copy when the wrapper wants the payload checksum)."""

    #: With the checksum kernel, loads are hashed in the copy (see the module docstring).
    reports_payload_checksum = checksum_kernel() is not None

    def deserialize(self, src: MemoryObj, dst: MemoryObj, key: ObjectKey) -> None:
        out = as_byte_tensor(dst)
        n = out.numel()
        _check_room("source", src.get_size(), n)
        _copy_payload(out, as_byte_tensor(src)[:n], payload_hasher(src), storing=False)


def _identity_pair(options: dict[str, Any]) -> SerdePair:
    return SerdePair(IdentitySerializer(), IdentityDeserializer())


IDENTITY_SPEC = SerdeSpec(
    pair_factory=_identity_pair,
    description=BUILTIN_FACTS[SERDE_GROUP]["identity"].description,
    options=processor_options(max_workers=1),
    size_contract=SerdeSizeContract.EXACT,
    lossy=False,
)
