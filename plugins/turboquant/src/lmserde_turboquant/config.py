"""The validated TurboQuant serde configuration."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import torch

from lmserde_turboquant import codec_native
from lmserde_turboquant.kv_layout import KVPlan, plan_kv
from lmserde_turboquant.presets import TurboQuantPreset, get_preset
from lmserde_turboquant.rotation import is_power_of_two

__all__ = [
    "AllRawLayoutWarning",
    "BACKENDS",
    "MAX_HEAD_DIM",
    "MIN_HEAD_DIM",
    "TurboQuantConfig",
    "TurboQuantSerdeConfig",
]

MIN_HEAD_DIM = 8
MAX_HEAD_DIM = 1024
#: Values of ``backend`` (the vocabulary every lmserde plugin with native code uses).
BACKENDS = ("auto", "native", "torch")


class AllRawLayoutWarning(UserWarning):
    """A KV layout has too few layers for the skip settings: it is stored uncompressed."""


def _require_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"TurboQuant option '{name}' must be an integer, got {value!r}")
    return value


#: Largest ``block_size`` (tokens per block); a block larger than any chunk only adds padding.
MAX_BLOCK_SIZE = 4096
#: Largest ``skip_first_layers`` / ``skip_last_layers``.
MAX_SKIPPED_LAYERS = 4096


@dataclass(frozen=True)
class TurboQuantConfig:
    """TurboQuant settings; every field is checked on creation (``ValueError`` naming it).

    ``backend``: ``"native"`` (the C codec; an error if it is not built), ``"torch"`` (the
    pure-torch codec) or ``"auto"`` (native for CPU tensors when built, torch otherwise). Both
    produce identical bytes. (The serde option was called ``implementation`` before; configs
    that still say so are accepted with a deprecation warning.)
    """

    preset: str = "turboquant_k8v4"
    head_dim: int = 128
    block_size: int = 16
    skip_first_layers: int = 2
    skip_last_layers: int = 2
    backend: str = "auto"

    def __post_init__(self) -> None:
        get_preset(self.preset)
        head_dim = _require_int("head_dim", self.head_dim)
        if not is_power_of_two(head_dim):
            raise ValueError(
                f"TurboQuant WHT rotation requires head_dim to be a power of two, got {head_dim}"
            )
        if not MIN_HEAD_DIM <= head_dim <= MAX_HEAD_DIM:
            raise ValueError(
                f"TurboQuant head_dim must be between {MIN_HEAD_DIM} and {MAX_HEAD_DIM}, "
                f"got {head_dim}"
            )
        if _require_int("block_size", self.block_size) < 1:
            raise ValueError(f"TurboQuant block_size must be >= 1, got {self.block_size}")
        if self.block_size > MAX_BLOCK_SIZE:
            raise ValueError(
                f"TurboQuant block_size must be <= {MAX_BLOCK_SIZE} tokens, got {self.block_size}"
            )
        first = _require_int("skip_first_layers", self.skip_first_layers)
        last = _require_int("skip_last_layers", self.skip_last_layers)
        if first < 0 or last < 0:
            raise ValueError(
                "TurboQuant skipped layer counts must be non-negative, got "
                f"skip_first_layers={first}, skip_last_layers={last}"
            )
        if first > MAX_SKIPPED_LAYERS or last > MAX_SKIPPED_LAYERS:
            raise ValueError(
                f"TurboQuant skipped layer counts must be <= {MAX_SKIPPED_LAYERS}, got "
                f"skip_first_layers={first}, skip_last_layers={last}"
            )
        if self.backend not in BACKENDS:
            raise ValueError(
                f"TurboQuant backend must be one of {', '.join(BACKENDS)}, got {self.backend!r}"
            )
        if self.backend == "native" and not codec_native.available():
            raise ValueError(
                "TurboQuant backend='native' was requested but the native codec is not "
                "built (no C compiler when the package was installed); use 'auto' or 'torch'"
            )

    @cached_property
    def preset_spec(self) -> TurboQuantPreset:
        """The :class:`TurboQuantPreset` named by :attr:`preset`."""
        return get_preset(self.preset)

    def plan(self, shape: torch.Size | tuple[int, ...], dtype: torch.dtype) -> KVPlan:
        """Validate one KV tensor layout and plan its stream; warns when it is all raw."""
        plan = plan_kv(
            shape,
            dtype,
            preset=self.preset_spec,
            head_dim=self.head_dim,
            block_size=self.block_size,
            skip_first_layers=self.skip_first_layers,
            skip_last_layers=self.skip_last_layers,
        )
        if plan.all_raw:
            warnings.warn(
                f"TurboQuant: KV layout {list(plan.shape)} has {plan.num_layers} layers and "
                f"skip_first_layers={self.skip_first_layers}, skip_last_layers="
                f"{self.skip_last_layers}: every layer is stored raw (no compression). Lower the "
                "skip counts to compress small models.",
                AllRawLayoutWarning,
                stacklevel=3,
            )
        return plan


#: LMCache's name for the configuration class.
TurboQuantSerdeConfig = TurboQuantConfig
