"""Per-layer constant tables (rotation signs, codebooks) cached per device."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import torch

from lmserde_turboquant.codebook import Codebook, lloyd_max_codebook
from lmserde_turboquant.presets import TurboQuantPreset
from lmserde_turboquant.rotation import rotation_signs

__all__ = ["LayerTables", "layer_tables", "stacked_signs"]


@dataclass(frozen=True)
class LayerTables:
    """What coding one layer needs: the layer's signs and the key and value codebooks.

    ``key_codebook`` / ``value_codebook`` are ``None`` for parts that use no codebook (fp8 keys,
    min/max values). ``sqrt_d`` is ``float32(sqrt(head_dim))``, the rotation's normalizer.
    """

    head_dim: int
    layer_idx: int
    signs: torch.Tensor
    key_codebook: Codebook | None
    value_codebook: Codebook | None
    sqrt_d: float


def _on(codebook: Codebook, device: torch.device) -> Codebook:
    if codebook.centroids.device == device:
        return codebook
    return Codebook(
        head_dim=codebook.head_dim,
        bits=codebook.bits,
        solver=codebook.solver,
        centroids=codebook.centroids.to(device),
        boundaries=codebook.boundaries.to(device),
    )


@lru_cache(maxsize=4096)
def _tables(preset: TurboQuantPreset, head_dim: int, layer_idx: int, device: str) -> LayerTables:
    dev = torch.device(device)
    key_cb = value_cb = None
    if preset.key_codec == "mse":
        key_cb = _on(lloyd_max_codebook(head_dim, preset.key_bits, preset.codebook_solver), dev)
    if preset.value_codec == "mse":
        value_cb = _on(
            lloyd_max_codebook(head_dim, preset.value_bits, preset.codebook_solver), dev
        )
    return LayerTables(
        head_dim=head_dim,
        layer_idx=layer_idx,
        signs=rotation_signs(head_dim, layer_idx).to(dev),
        key_codebook=key_cb,
        value_codebook=value_cb,
        sqrt_d=float(torch.tensor(math.sqrt(head_dim), dtype=torch.float32)),
    )


def layer_tables(
    preset: TurboQuantPreset, head_dim: int, layer_idx: int, device: torch.device | str = "cpu"
) -> LayerTables:
    """The cached tables of absolute layer ``layer_idx`` on ``device``."""
    return _tables(preset, head_dim, layer_idx, str(torch.device(device)))


@lru_cache(maxsize=256)
def _stacked(head_dim: int, start: int, stop: int, device: str) -> torch.Tensor:
    if stop <= start:
        return torch.empty(0, head_dim, dtype=torch.float32, device=device)
    return torch.stack([rotation_signs(head_dim, i) for i in range(start, stop)]).to(device)


def stacked_signs(
    head_dim: int, start: int, stop: int, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """The signs of layers ``start .. stop - 1`` as one contiguous float32 ``[n, head_dim]``."""
    return _stacked(head_dim, start, stop, str(torch.device(device)))
