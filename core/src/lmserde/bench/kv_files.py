"""Real captured KV tensors from a ``.safetensors`` file, cut into bench chunks.

Expected content: two tensors named ``keys`` and ``values``, each
``[num_layers, num_tokens, num_kv_heads, head_dim]`` with the same shape and a dtype among
bfloat16, float16 and float32 (the cache's own dtype: it is kept). Tokens are consecutive
positions of one sequence. Chunk ``i`` holds tokens ``[i*T, (i+1)*T)``; a shorter tail is
dropped. Only the slices a chunk needs are read (the file is memory-mapped).
Needs the ``safetensors`` package (``pip install 'lmserde[kv-files]'``).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import torch

from lmserde.bench.kv_chunk import KV_DTYPES, KVChunk, select_layers

__all__ = ["KVFileSource", "KEY_TENSOR", "VALUE_TENSOR"]

KEY_TENSOR = "keys"
VALUE_TENSOR = "values"

_INSTALL_HINT = "pip install safetensors  (or: pip install 'lmserde[kv-files]')"


def _safe_open() -> Any:
    try:
        module = importlib.import_module("safetensors")
    except ImportError:
        raise ValueError(
            f"--kv needs the 'safetensors' package, which is not installed. Install it with: "
            f"{_INSTALL_HINT}"
        ) from None
    return module.safe_open


class KVFileSource:
    """Chunks of ``tokens`` tokens (default: 256, or the whole file if shorter) of at most
    ``layers`` evenly spaced layers, first and last included (default: all) from a safetensors file."""

    def __init__(self, path: str | Path, *, layers: int | None = None, tokens: int | None = None,
                 default_tokens: int = 256) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise ValueError(f"--kv file not found: {self.path}")
        safe_open = _safe_open()
        try:
            with safe_open(str(self.path), framework="pt") as f:
                names = set(f.keys())
                missing = [n for n in (KEY_TENSOR, VALUE_TENSOR) if n not in names]
                if missing:
                    found = ", ".join(sorted(names)) or "(none)"
                    raise ValueError(
                        f"{self.path}: missing tensor(s) {', '.join(missing)}; expected 'keys' and "
                        f"'values' of shape [layers, tokens, kv_heads, head_dim]; found: {found}"
                    )
                k_slice, v_slice = f.get_slice(KEY_TENSOR), f.get_slice(VALUE_TENSOR)
                k_shape, v_shape = list(k_slice.get_shape()), list(v_slice.get_shape())
                k_dtype, v_dtype = k_slice.get_dtype(), v_slice.get_dtype()
        except ValueError:
            raise
        except Exception as exc:  # a corrupt header, not a safetensors file, ...
            raise ValueError(f"{self.path}: cannot read as safetensors: {exc}") from exc
        if len(k_shape) != 4 or k_shape != v_shape:
            raise ValueError(
                f"{self.path}: 'keys' {k_shape} and 'values' {v_shape} must both be "
                "[layers, tokens, kv_heads, head_dim]"
            )
        if k_dtype != v_dtype or k_dtype not in ("BF16", "F16", "F32"):
            allowed = ", ".join(str(d).removeprefix("torch.") for d in KV_DTYPES)
            raise ValueError(
                f"{self.path}: 'keys' ({k_dtype}) and 'values' ({v_dtype}) must share one dtype "
                f"among {allowed}"
            )
        num_layers, num_tokens, self.num_heads, self.head_dim = k_shape
        if min(k_shape) < 1:
            raise ValueError(f"{self.path}: empty KV tensors {k_shape}")
        self.file_layers = num_layers
        self.file_tokens = num_tokens
        self.layer_ids = select_layers(num_layers, num_layers if layers is None else min(layers, num_layers))
        self.tokens = min(default_tokens, num_tokens) if tokens is None else int(tokens)
        if not 1 <= self.tokens <= num_tokens:
            raise ValueError(
                f"tokens per chunk must be in [1, {num_tokens}] for {self.path}, got {self.tokens}"
            )
        self.num_chunks = num_tokens // self.tokens

    def chunk(self, index: int) -> KVChunk:
        """Chunk ``index``; ``ValueError`` past the end of the file."""
        if not 0 <= index < self.num_chunks:
            raise ValueError(
                f"{self.path} holds {self.num_chunks} chunk(s) of {self.tokens} tokens; "
                f"chunk {index} requested"
            )
        start, stop = index * self.tokens, (index + 1) * self.tokens
        safe_open = _safe_open()
        with safe_open(str(self.path), framework="pt") as f:
            keys, values = (
                torch.cat([f.get_slice(name)[i:i + 1, start:stop] for i in self.layer_ids])
                for name in (KEY_TENSOR, VALUE_TENSOR)
            )
        return KVChunk(keys.contiguous(), values.contiguous(), self.layer_ids, start)
