"""Built-in model configurations for the synthetic KV generator: shapes plus cache statistics.

Shapes (layers, KV heads, head dim, RoPE base) are those of the public model configs; the
statistical knobs (outlier channels, key offsets) are chosen to reproduce the qualitative
features reported for real caches, not fitted to any checkpoint. See ``docs/bench.md``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ModelShape", "BUILTIN_MODELS", "DEFAULT_MODEL", "DEFAULT_CHUNK_TOKENS", "get_model_shape"]

#: LMCache's default chunk size in tokens.
DEFAULT_CHUNK_TOKENS = 256


@dataclass(frozen=True)
class ModelShape:
    """Shape and key/value statistics of one model's KV cache.

    ``outlier_channels`` rotary pairs per (layer, head) get ``outlier_scale`` times the typical key
    magnitude, mostly as a per-channel mean that persists across tokens (what makes per-tensor
    quantization of keys hard). ``boundary_offset_layers`` first and last layers add a large key
    bias of ``boundary_offset_scale`` on a few channels (Qwen-style QKV bias). Values are
    low-rank Gaussian with per-channel and per-head scales that grow with depth.
    """

    name: str
    description: str
    num_layers: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS
    outlier_channels: int = 2
    outlier_scale: float = 8.0
    boundary_offset_layers: int = 0
    boundary_offset_scale: float = 0.0

    def __post_init__(self) -> None:
        for field_name in ("num_layers", "num_kv_heads", "head_dim", "chunk_tokens"):
            value = getattr(self, field_name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"ModelShape.{field_name} must be a positive int, got {value!r}")
        if self.head_dim % 2:
            raise ValueError(f"ModelShape.head_dim must be even (rotary pairs), got {self.head_dim}")
        if not 0 <= self.outlier_channels <= self.head_dim // 2:
            raise ValueError(
                f"ModelShape.outlier_channels must be in [0, head_dim/2], got {self.outlier_channels}"
            )
        if self.rope_theta <= 1.0:
            raise ValueError(f"ModelShape.rope_theta must be > 1, got {self.rope_theta}")

    @property
    def hidden(self) -> int:
        """KV hidden size per token and layer: heads x head dim."""
        return self.num_kv_heads * self.head_dim


BUILTIN_MODELS: dict[str, ModelShape] = {
    m.name: m
    for m in (
        ModelShape(
            name="llama-3-8b",
            description="Llama-3-8B-like: 32 layers, 8 KV heads (GQA), head dim 128, RoPE base 5e5",
            num_layers=32, num_kv_heads=8, head_dim=128, rope_theta=500_000.0,
            outlier_channels=3, outlier_scale=8.0,
        ),
        ModelShape(
            name="mistral-7b",
            description="Mistral-7B-like: 32 layers, 8 KV heads (GQA), head dim 128, RoPE base 1e4",
            num_layers=32, num_kv_heads=8, head_dim=128, rope_theta=10_000.0,
            outlier_channels=2, outlier_scale=6.0,
        ),
        ModelShape(
            name="qwen2.5-7b",
            description="Qwen2.5-7B-like: 28 layers, 4 KV heads (GQA), head dim 128, RoPE base 1e6, "
            "QKV bias: large key offsets in boundary layers",
            num_layers=28, num_kv_heads=4, head_dim=128, rope_theta=1_000_000.0,
            outlier_channels=4, outlier_scale=10.0,
            boundary_offset_layers=2, boundary_offset_scale=40.0,
        ),
        ModelShape(
            name="tiny",
            description="Tiny test configuration: 4 layers, 2 KV heads, head dim 64, 16-token chunks",
            num_layers=4, num_kv_heads=2, head_dim=64, rope_theta=10_000.0, chunk_tokens=16,
            outlier_channels=2, outlier_scale=8.0,
            boundary_offset_layers=1, boundary_offset_scale=20.0,
        ),
    )
}

DEFAULT_MODEL = "llama-3-8b"


def get_model_shape(name: str) -> ModelShape:
    """The built-in model ``name``; ``ValueError`` listing the known names otherwise."""
    try:
        return BUILTIN_MODELS[name]
    except KeyError:
        known = ", ".join(BUILTIN_MODELS)
        raise ValueError(f"unknown model '{name}'. Built-in models: {known}") from None
