"""Synthetic KV-cache chunks with the shapes and the qualitative statistics of real models.

The generator is deterministic: chunk ``i`` of a given (model, seed, layers, tokens) is the same
on every run and does not depend on how many chunks are requested. Per-layer "model weights"
(channel scales, outlier channels, key means, low-rank mixing matrices) depend on the seed and the
layer only, so every chunk of a run shares them, as chunks of one model do.

Keys: a per-channel mean (large on a few low-frequency rotary pairs: the outlier channels),
per-channel scales, a low-rank token-correlated component plus noise, then rotary position
embedding (RoPE, rotate-half convention) at the chunk's absolute positions. Boundary layers of
models with a QKV bias get a large additional key offset on a few channels. Values: a low-rank
Gaussian with per-channel and per-head scales growing with depth, no rotary structure.
What is modelled, and what is not, is documented in ``docs/bench.md``.
"""

from __future__ import annotations

import hashlib
import math

import torch

from lmserde.bench.kv_chunk import KV_DTYPES, KVChunk, select_layers
from lmserde.bench.model_shapes import ModelShape

__all__ = ["SyntheticKVGenerator", "derive_seed"]

_KEY_RANK = 16
_VALUE_RANK = 32
_KEY_NOISE = 0.4
_VALUE_NOISE = 0.5
_TOKEN_CORRELATION = 0.7  # AR(1) coefficient of the latent token process
_VALUE_STD_FIRST_LAYER = 0.05
_VALUE_STD_LAST_LAYER = 0.35


def derive_seed(*parts: object) -> int:
    """A 63-bit seed from any printable parts (stable across runs and platforms)."""
    digest = hashlib.blake2b("\x1f".join(str(p) for p in parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


def _generator(*parts: object) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(derive_seed(*parts))
    return g


class _LayerWeights:
    """The per-layer parameters every chunk of one model shares: ``[H, ...]`` tensors."""

    def __init__(self, shape: ModelShape, layer_id: int, seed: int) -> None:
        H, D = shape.num_kv_heads, shape.head_dim
        half = D // 2
        g = _generator("lmserde-bench-layer", seed, shape.name, layer_id)
        self.key_scale = torch.exp(0.25 * torch.randn(H, D, generator=g))
        self.key_mean = 0.3 * torch.randn(H, D, generator=g) * self.key_scale
        # Outlier channels: a few low-frequency rotary pairs (slowly rotating, so a large mean
        # survives RoPE within a chunk) with a large mean and a larger spread.
        low_freq = torch.arange(half - max(half // 4, shape.outlier_channels), half)
        for h in range(H):
            picks = low_freq[torch.randperm(low_freq.numel(), generator=g)[: shape.outlier_channels]]
            for pair in picks.tolist():
                magnitude = shape.outlier_scale * (0.7 + 0.6 * torch.rand((), generator=g).item())
                angle = 2 * math.pi * torch.rand((), generator=g).item()
                self.key_mean[h, pair] = magnitude * math.cos(angle)
                self.key_mean[h, pair + half] = magnitude * math.sin(angle)
                self.key_scale[h, pair] *= 2.0
                self.key_scale[h, pair + half] *= 2.0
        edge = shape.boundary_offset_layers
        if edge and (layer_id < edge or layer_id >= shape.num_layers - edge):
            # QKV-bias style offset: a few channels carry a large constant key component.
            for h in range(H):
                pair = int(low_freq[torch.randint(low_freq.numel(), (), generator=g)])
                sign = 1.0 if torch.rand((), generator=g).item() < 0.5 else -1.0
                self.key_mean[h, pair] += sign * shape.boundary_offset_scale
        self.key_mix = torch.randn(H, D, _KEY_RANK, generator=g) / math.sqrt(_KEY_RANK)
        depth = layer_id / max(shape.num_layers - 1, 1)
        value_std = _VALUE_STD_FIRST_LAYER + (_VALUE_STD_LAST_LAYER - _VALUE_STD_FIRST_LAYER) * depth
        head_scale = torch.exp(0.3 * torch.randn(H, 1, generator=g))
        self.value_scale = value_std * head_scale * torch.exp(0.2 * torch.randn(H, D, generator=g))
        self.value_mix = torch.randn(H, D, _VALUE_RANK, generator=g) / math.sqrt(
            _VALUE_RANK * (1.0 + _VALUE_NOISE**2)
        )


_AR1_TAPS = 32  # rho**32 < 1e-4: longer lags are negligible


def _ar1(noise: torch.Tensor) -> torch.Tensor:
    """A stationary, unit-variance AR(1) process over dim -2 of white ``noise`` (``[..., T, r]``).

    ``x_t = rho * x_{t-1} + sqrt(1 - rho^2) * e_t`` with ``x_0 = e_0``, computed as a causal
    convolution with the process's impulse response truncated after ``_AR1_TAPS`` lags.
    """
    rho = _TOKEN_CORRELATION
    *lead, tokens, rank = noise.shape
    scaled = noise.clone()
    scaled[..., 0, :] /= math.sqrt(1.0 - rho * rho)  # token 0 starts at the stationary variance
    taps = min(_AR1_TAPS, tokens)
    kernel = (math.sqrt(1.0 - rho * rho) * rho ** torch.arange(taps - 1, -1, -1, dtype=torch.float32))
    series = scaled.movedim(-2, -1).reshape(-1, 1, tokens)  # [N, 1, T]
    out = torch.nn.functional.conv1d(torch.nn.functional.pad(series, (taps - 1, 0)),
                                     kernel.view(1, 1, taps))
    return out.reshape(*lead, rank, tokens).movedim(-1, -2)


def _rope_tables(positions: torch.Tensor, head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``cos`` and ``sin`` tables ``[T, D]`` of rotary embedding, rotate-half convention."""
    half = head_dim // 2
    inv_freq = theta ** (-torch.arange(half, dtype=torch.float64) * 2.0 / head_dim)
    angles = positions.to(torch.float64)[:, None] * inv_freq[None, :]
    return (torch.cos(angles).to(torch.float32).repeat(1, 2),
            torch.sin(angles).to(torch.float32).repeat(1, 2))


def _apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs ``(i, i + D/2)`` of ``x`` (``[..., T, D]``) by the tables' angles."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class SyntheticKVGenerator:
    """Chunks of ``shape``'s KV cache, ``layers`` layers (evenly spaced, first and last included)
    of ``tokens`` tokens each; chunk ``i`` covers positions ``[i*tokens, (i+1)*tokens)``."""

    def __init__(
        self,
        shape: ModelShape,
        *,
        seed: int = 0,
        layers: int | None = None,
        tokens: int | None = None,
        dtype: torch.dtype = torch.bfloat16,
    ) -> None:
        if dtype not in KV_DTYPES:
            raise ValueError(f"unsupported KV dtype {dtype}; use one of {KV_DTYPES}")
        self.shape = shape
        self.seed = int(seed)
        self.layer_ids = select_layers(shape.num_layers, shape.num_layers if layers is None else layers)
        self.tokens = shape.chunk_tokens if tokens is None else int(tokens)
        if self.tokens < 1:
            raise ValueError(f"tokens per chunk must be >= 1, got {self.tokens}")
        self.dtype = dtype
        weights = [_LayerWeights(shape, layer, self.seed) for layer in self.layer_ids]
        self._key_scale = torch.stack([w.key_scale for w in weights])  # [L, H, D]
        self._key_mean = torch.stack([w.key_mean for w in weights])
        self._key_mix = torch.stack([w.key_mix for w in weights])  # [L, H, D, rank]
        self._value_scale = torch.stack([w.value_scale for w in weights])
        self._value_mix = torch.stack([w.value_mix for w in weights])

    @property
    def chunk_nbytes(self) -> int:
        """Raw bytes (K plus V) of one chunk."""
        return 2 * len(self.layer_ids) * self.tokens * self.shape.hidden * self.dtype.itemsize

    def chunk(self, index: int) -> KVChunk:
        """Chunk ``index`` (deterministic)."""
        if index < 0:
            raise ValueError(f"chunk index must be >= 0, got {index}")
        L, H, D, T = len(self.layer_ids), self.shape.num_kv_heads, self.shape.head_dim, self.tokens
        start = index * T
        cos, sin = _rope_tables(torch.arange(start, start + T), D, self.shape.rope_theta)
        g = _generator("lmserde-bench-chunk", self.seed, self.shape.name, self.layer_ids, index, T)
        latent = _ar1(torch.randn(L, H, T, _KEY_RANK, generator=g))
        k = torch.matmul(latent, self._key_mix.transpose(-1, -2))  # [L, H, T, D]
        k += _KEY_NOISE * torch.randn(L, H, T, D, generator=g)
        k = self._key_mean[:, :, None, :] + self._key_scale[:, :, None, :] * k
        k = _apply_rope(k, cos, sin)
        latent = _ar1(torch.randn(L, H, T, _VALUE_RANK, generator=g))
        v = torch.matmul(latent, self._value_mix.transpose(-1, -2))
        v += (_VALUE_NOISE / math.sqrt(1.0 + _VALUE_NOISE**2)) * torch.randn(L, H, T, D, generator=g)
        v *= self._value_scale[:, :, None, :]
        keys = k.transpose(1, 2).to(self.dtype).contiguous()
        values = v.transpose(1, 2).to(self.dtype).contiguous()
        return KVChunk(keys, values, self.layer_ids, start)
