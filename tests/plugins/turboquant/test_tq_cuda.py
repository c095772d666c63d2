"""On a CUDA device the pure-torch codec runs there and gives the CPU codec's exact bytes."""

from __future__ import annotations

import pytest
import torch
from lmserde import MemoryLayoutDesc, TensorMemoryObj
from lmserde_turboquant import PRESETS, TurboQuantConfig, TurboQuantDeserializer, TurboQuantSerializer
from tq_support import KEY, kv_tensor, needs_cuda

pytestmark = needs_cuda


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("name", list(PRESETS))
def test_cuda_bytes_and_values_equal_cpu(name: str, dtype: torch.dtype) -> None:
    cfg = TurboQuantConfig(preset=name, skip_first_layers=1, skip_last_layers=1, block_size=8)
    ser, de = TurboQuantSerializer(cfg), TurboQuantDeserializer(cfg)
    x = kv_tensor([2, 5, 21, 512], dtype, seed=3)
    n = ser.estimate_serialized_size(MemoryLayoutDesc([x.shape], [x.dtype]))
    blobs = []
    for device in ("cpu", "cuda"):
        src = TensorMemoryObj.from_tensor(x.to(device))
        dst = TensorMemoryObj.allocate(MemoryLayoutDesc([[n]], [torch.uint8]))
        assert ser.serialize(src, dst, KEY) == n
        blobs.append(dst.raw_data.clone())
    assert torch.equal(blobs[0], blobs[1]), "CUDA bytes differ from CPU bytes"
    outs = []
    for device in ("cpu", "cuda"):
        out = TensorMemoryObj.from_tensor(torch.zeros(x.shape, dtype=dtype, device=device))
        de.deserialize(TensorMemoryObj.from_tensor(blobs[0]), out, KEY)
        outs.append(out.tensor.cpu())
    assert torch.equal(outs[0].view(torch.uint8), outs[1].view(torch.uint8))


def test_fused_layout_on_cuda() -> None:
    cfg = TurboQuantConfig(preset="tq3", skip_first_layers=0, skip_last_layers=0)
    ser = TurboQuantSerializer(cfg)
    x = kv_tensor([1, 3, 16, 1024], torch.bfloat16, seed=4)
    n = ser.estimate_serialized_size(MemoryLayoutDesc([x.shape], [x.dtype]))
    blobs = []
    for device in ("cpu", "cuda"):
        dst = TensorMemoryObj.allocate(MemoryLayoutDesc([[n]], [torch.uint8]))
        ser.serialize(TensorMemoryObj.from_tensor(x.to(device)), dst, KEY)
        blobs.append(dst.raw_data.clone())
    assert torch.equal(blobs[0], blobs[1])
