"""End to end: TurboQuant on the fs L2 adapter through the serde wrapper and an L1Manager."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from lmserde import MemoryLayoutDesc, ObjectKey, TensorMemoryObj
from lmserde.l1 import L1Manager
from lmserde.l2 import FRAME_HEADER_BYTES, create_l2_adapter, key_file_name, load_sync, store_sync
from lmserde.l2.serde.stored_frame import parse_header
from lmserde_turboquant import TurboQuantConfig
from tq_support import kv_tensor, rel_error

SHAPE = [2, 6, 20, 256]  # 6 layers, 20 tokens, 2 heads of 128
KEYS = [ObjectKey(bytes([i]) * 32, "tq/model", 0) for i in range(3)]


@pytest.fixture
def l1() -> L1Manager:
    return L1Manager(64 << 20)


@pytest.fixture
def make_adapter(tmp_path: Path, l1: L1Manager) -> Iterator[Any]:
    adapters: list[Any] = []

    def make(**serde: Any) -> Any:
        adapter = create_l2_adapter(
            {"type": "fs", "base_path": str(tmp_path / "l2"),
             "serde": {"type": "turboquant", **serde}},
            l1,
        )
        adapters.append(adapter)
        return adapter

    yield make
    for adapter in adapters:
        adapter.close()


def _load(adapter: Any, l1: L1Manager, dtype: torch.dtype) -> tuple[list[bool], list[Any]]:
    layout = MemoryLayoutDesc([SHAPE], [dtype])
    outs = [TensorMemoryObj.allocate(layout, zero=True) for _ in KEYS]
    bitmap = load_sync(adapter, KEYS, outs)
    assert l1.memory_used_bytes() == 0, "serde temporaries leaked"
    return [bitmap.test(i) for i in range(len(KEYS))], outs


@pytest.mark.parametrize(("preset", "bound"), [("turboquant_k8v4", 0.08),
                                               ("turboquant_3bit_nc", 0.22), ("tq3", 0.19)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_store_and_load_through_fs(make_adapter: Any, l1: L1Manager, preset: str, bound: float,
                                   dtype: torch.dtype) -> None:
    adapter = make_adapter(preset=preset, max_workers=2)
    xs = [kv_tensor(SHAPE, dtype, seed=i) for i in range(len(KEYS))]
    result = store_sync(adapter, KEYS, [TensorMemoryObj.from_tensor(x) for x in xs])
    payload = TurboQuantConfig(preset=preset).plan(torch.Size(SHAPE), dtype).nbytes
    expected = FRAME_HEADER_BYTES + payload  # the stored-object frame header, then the plan's bytes
    assert result.is_successful() and result.bytes_transferred() == 3 * expected
    base = Path(adapter.inner_adapter.base_path)
    for key in KEYS:
        stored = (base / key_file_name(key)).read_bytes()
        assert len(stored) == expected and parse_header(stored).payload_length == payload
    hits, outs = _load(adapter, l1, dtype)
    assert hits == [True, True, True]
    assert adapter.metrics()["rejections"] == {}
    for x, out in zip(xs, outs):
        y = out.tensor
        assert torch.equal(y[:, :2], x[:, :2]) and torch.equal(y[:, 4:], x[:, 4:])  # raw layers
        assert rel_error(x[:, 2:4], y[:, 2:4]) < bound


def test_truncated_file_misses_alone(make_adapter: Any, l1: L1Manager) -> None:
    adapter = make_adapter(preset="tq4")
    xs = [kv_tensor(SHAPE, torch.bfloat16, seed=i) for i in range(len(KEYS))]
    assert store_sync(adapter, KEYS, [TensorMemoryObj.from_tensor(x) for x in xs]).is_successful()
    path = Path(adapter.inner_adapter.base_path) / key_file_name(KEYS[1])
    path.write_bytes(path.read_bytes()[:-1])
    hits, outs = _load(adapter, l1, torch.bfloat16)
    assert hits == [True, False, True]
    assert rel_error(xs[2], outs[2].tensor) < 0.1


def test_unencodable_object_fails_the_store(make_adapter: Any, l1: L1Manager) -> None:
    adapter = make_adapter(preset="tq4", skip_first_layers=0, skip_last_layers=0)
    x = kv_tensor(SHAPE, torch.float32)
    x[0, 3, 5, 7] = float("nan")
    result = store_sync(adapter, KEYS[:1], [TensorMemoryObj.from_tensor(x)])
    assert not result.is_successful()
    assert l1.memory_used_bytes() == 0
    hits, _ = _load(adapter, l1, torch.float32)
    assert hits == [False, False, False]


@pytest.mark.parametrize("preset", ["turboquant_k3v4_nc", "tq_k4v3"])
def test_store_and_load_through_the_memory_adapter(l1: L1Manager, preset: str) -> None:
    adapter = create_l2_adapter({"type": "memory", "serde": {"type": "turboquant",
                                                             "preset": preset}}, l1)
    try:
        xs = [kv_tensor(SHAPE, torch.bfloat16, seed=10 + i) for i in range(len(KEYS))]
        assert store_sync(adapter, KEYS, [TensorMemoryObj.from_tensor(x) for x in xs]
                          ).is_successful()
        hits, outs = _load(adapter, l1, torch.bfloat16)
        assert hits == [True, True, True]
        for x, out in zip(xs, outs):
            both = torch.stack([x.float().flatten(), out.tensor.float().flatten()])
            assert torch.corrcoef(both)[0, 1] > 0.98
    finally:
        adapter.close()
