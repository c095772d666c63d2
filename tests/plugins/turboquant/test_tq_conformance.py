"""The lmserde conformance kit on TurboQuant presets (native and torch codecs)."""

from __future__ import annotations

from typing import ClassVar

import torch
from lmserde import MemoryLayoutDesc
from lmserde.testing import SerdeConformance

# Valid TurboQuant KV layouts at head_dim 64: split and fused, three dtypes, multi-group objects
# (one with an empty group), default layer skips (2 and 2) leaving 1-2 quantized layers.
KV_LAYOUTS = (
    MemoryLayoutDesc([[2, 6, 16, 128]], [torch.bfloat16]),
    MemoryLayoutDesc([[1, 5, 7, 256]], [torch.float16]),
    MemoryLayoutDesc([[2, 5, 3, 64]], [torch.float32]),
    MemoryLayoutDesc([[2, 5, 8, 128], [1, 5, 8, 128]], [torch.bfloat16, torch.float16]),
    MemoryLayoutDesc([[2, 5, 0, 128], [2, 6, 4, 64], [1, 5, 9, 128]],
                     [torch.bfloat16, torch.float32, torch.bfloat16]),
)


class TurboQuantConformance(SerdeConformance):
    serde_type = "turboquant"
    layouts: ClassVar = KV_LAYOUTS


class TestK8V4Conformance(TurboQuantConformance):
    serde_kwargs: ClassVar = {"preset": "turboquant_k8v4", "head_dim": 64}
    max_relative_error = 0.08


class TestFourBitConformance(TurboQuantConformance):
    serde_kwargs: ClassVar = {"preset": "turboquant_4bit_nc", "head_dim": 64, "block_size": 4}
    max_relative_error = 0.1


class TestThreeBitConformance(TurboQuantConformance):
    serde_kwargs: ClassVar = {"preset": "turboquant_3bit_nc", "head_dim": 64}
    max_relative_error = 0.2


class TestTq3Conformance(TurboQuantConformance):
    serde_kwargs: ClassVar = {"preset": "tq3", "head_dim": 64, "skip_first_layers": 1}
    max_relative_error = 0.19


class TestTq2TorchCodecConformance(TurboQuantConformance):
    serde_kwargs: ClassVar = {"preset": "tq2", "head_dim": 64, "backend": "torch",
                              "skip_first_layers": 0, "skip_last_layers": 0}
    max_relative_error = 0.36


class TestK3V4Conformance(TurboQuantConformance):
    serde_kwargs: ClassVar = {"preset": "turboquant_k3v4_nc", "head_dim": 64}
    max_relative_error = 0.19


class TestTq4Conformance(TurboQuantConformance):
    serde_kwargs: ClassVar = {"preset": "tq4", "head_dim": 64}
    max_relative_error = 0.1


class TestTqK4V3Conformance(TurboQuantConformance):
    serde_kwargs: ClassVar = {"preset": "tq_k4v3", "head_dim": 64}
    max_relative_error = 0.19


class TestTqK4V2Conformance(TurboQuantConformance):
    serde_kwargs: ClassVar = {"preset": "tq_k4v2", "head_dim": 64}
    max_relative_error = 0.36


class TestTqK3V2Conformance(TurboQuantConformance):
    serde_kwargs: ClassVar = {"preset": "tq_k3v2", "head_dim": 64, "block_size": 3}
    max_relative_error = 0.36
