"""An independent model of LMCache's TurboQuant slot arithmetic, written from its contract.

It follows LMCache's order of operations (dense rotation matrix ``PiT``, division by the norm,
``bucketize`` on the midpoints, decode through fp16 buffers) rather than ours, so comparing the
two shows what "the same bytes" means in practice: equal except where float32 rounding moves a
coordinate across a codebook boundary.
"""

from __future__ import annotations

import math

import torch
from lmserde_turboquant.bitpack import pack_indices, unpack_indices
from lmserde_turboquant.codebook import lloyd_max_codebook
from lmserde_turboquant.presets import TurboQuantPreset
from lmserde_turboquant.rotation import hadamard_matrix, rotation_signs


def pi_t(d: int, layer: int) -> torch.Tensor:
    """LMCache's ``PiT = signs[:, None] * (H / sqrt(D))`` in float32."""
    h = hadamard_matrix(d) / math.sqrt(d)
    return (rotation_signs(d, layer).unsqueeze(1) * h).contiguous()


def _fp16_le(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.float16).view(torch.uint8).view(x.shape[0], 2)


def encode(k: torch.Tensor, v: torch.Tensor, p: TurboQuantPreset, layer: int) -> torch.Tensor:
    """Slots ``[N, slot_stride]`` for rows ``k``, ``v`` ``[N, D]`` (LMCache presets only)."""
    n, d = k.shape
    out = torch.zeros(n, p.slot_stride(d), dtype=torch.uint8)
    kps = p.key_bytes(d)
    if p.key_codec == "fp8":
        out[:, :d] = k.float().clamp(-448, 448).to(torch.float8_e4m3fn).view(torch.uint8)
    else:
        kf = k.float()
        norms = kf.norm(dim=1, keepdim=True)
        y = (kf / (norms + 1e-8)) @ pi_t(d, layer)
        mids = lloyd_max_codebook(d, p.key_bits, "lmcache").boundaries
        nb = d * p.key_bits // 8
        out[:, :nb] = pack_indices(torch.bucketize(y, mids, right=True), p.key_bits)
        out[:, nb : nb + 2] = _fp16_le(norms.squeeze(1))
    vf = v.float()
    lo, hi = vf.amin(dim=1), vf.amax(dim=1)
    scale = (hi - lo) / float(2**p.value_bits - 1)
    scale = torch.where(scale > 1e-8, scale, torch.full_like(scale, 1e-8))
    q = ((vf - lo[:, None]) / scale[:, None] + 0.5).to(torch.int32).clamp(0, 2**p.value_bits - 1)
    nb = d * p.value_bits // 8
    out[:, kps : kps + nb] = pack_indices(q, p.value_bits)
    out[:, kps + nb : kps + nb + 2] = _fp16_le(scale)
    out[:, kps + nb + 2 : kps + nb + 4] = _fp16_le(lo)
    return out


def decode(slots: torch.Tensor, d: int, p: TurboQuantPreset, layer: int,
           ) -> tuple[torch.Tensor, torch.Tensor]:
    """float32 ``(k, v)`` as LMCache decodes them (fp16 intermediates, host-side unrotation)."""
    kps = p.key_bytes(d)
    if p.key_codec == "fp8":
        k16 = slots[:, :d].contiguous().view(torch.float8_e4m3fn).float().half()
        k = k16.float()
    else:
        nb = d * p.key_bits // 8
        c = lloyd_max_codebook(d, p.key_bits, "lmcache").centroids[
            unpack_indices(slots[:, :nb], p.key_bits, d)]
        if p.norm_correction:
            c = c / torch.sqrt((c * c).sum(dim=1, keepdim=True) + 1e-16)
        norm = slots[:, nb : nb + 2].contiguous().view(torch.float16).float()
        k = (norm * c).half().float() @ pi_t(d, layer).T
    nb = d * p.value_bits // 8
    q = unpack_indices(slots[:, kps : kps + nb], p.value_bits, d).float()
    side = slots[:, kps + nb : kps + nb + 4].contiguous().view(torch.float16).float()
    v = (q * side[:, :1] + side[:, 1:2]).half().float()
    return k, v
