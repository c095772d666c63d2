"""The public conformance kit (multi-output variant) on both serde types."""

from __future__ import annotations

from typing import ClassVar

import torch
from lmserde import MemoryLayoutDesc
from lmserde.testing import DEFAULT_KV_LAYOUTS, MultiSerdeConformance

# The kit's K/V layouts plus K and V of different dtypes and sizes. (A misaligned V group is tested
# directly in test_asym_serdes.py: the processor cannot yet measure such slot views.)
_LAYOUTS = (
    *DEFAULT_KV_LAYOUTS,
    MemoryLayoutDesc([[3, 5, 8], [2, 9]], [torch.float16, torch.float32]),
)


class TestAsymK16V8Conformance(MultiSerdeConformance):
    serde_type = "asym_k16_v8"
    layouts: ClassVar = _LAYOUTS
    exact_slots: ClassVar[tuple[int, ...]] = (0,)  # K is bit-exact
    max_relative_error = 0.05  # V: fp8 e4m3 with a per-tensor scale on normal data
    detects_corruption = True  # magic + CRC-32


class TestAsymK16V8VOnlyConformance(MultiSerdeConformance):
    serde_type = "asym_k16_v8_v_only"
    layouts: ClassVar = _LAYOUTS
    max_relative_error = 0.05
    detects_corruption = True
