"""Every shipped serde, preset family and chain, as the integration tests enumerate them (the
fail-closed campaign, the authenticated-frame forgeries)."""

from __future__ import annotations

from typing import Any

import torch
from lmserde import MemoryLayoutDesc

KV = MemoryLayoutDesc([[2, 6, 16, 256]], [torch.bfloat16])
KV2 = MemoryLayoutDesc([[4, 16, 2, 64], [4, 16, 2, 64]], [torch.bfloat16, torch.bfloat16])


def shipped_serdes(master_key: str) -> dict[str, tuple[Any, MemoryLayoutDesc]]:
    """Name -> (serde spec, object layout); ``master_key``: the aesgcm stages' key file."""
    aes = {"type": "aesgcm", "master_key_path": master_key}
    return {
        "identity": ({"type": "identity"}, KV),
        "fp8": ({"type": "fp8"}, KV),
        "fp8-e5m2": ({"type": "fp8", "fp8_dtype": "float8_e5m2"}, KV),
        "fp8-per-token": ({"type": "fp8", "scaling": "per_token"}, KV),
        "aesgcm-v1": ({**aes, "frame_version": 1}, KV),
        # v3: a v2 frame names no key id, so its failed authentication is not provable damage
        # (a kept miss, tested in tests/plugins/aesgcm) and this campaign asserts repairs
        "aesgcm-v3": ({**aes, "frame_version": 3}, KV),
        "turboquant_k8v4": ({"type": "turboquant", "preset": "turboquant_k8v4"}, KV),
        "turboquant_4bit_nc": ({"type": "turboquant", "preset": "turboquant_4bit_nc"}, KV),
        "turboquant_k3v4_nc": ({"type": "turboquant", "preset": "turboquant_k3v4_nc"}, KV),
        "turboquant_3bit_nc": ({"type": "turboquant", "preset": "turboquant_3bit_nc"}, KV),
        "tq3": ({"type": "turboquant", "preset": "tq3"}, KV),
        "asym_k16_v8": ({"type": "asym_k16_v8"}, KV2),
        "fp8+aesgcm": ([{"type": "fp8"}, {**aes, "frame_version": 1}], KV),
        "identity+aesgcm-v3": ([{"type": "identity"}, aes], KV),
    }
