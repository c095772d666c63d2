"""``zstd`` in serde chains: ``[fp8, zstd]``, ``[zstd, aesgcm]``; ``[aesgcm, zstd]`` is refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from lmserde import MemoryLayoutDesc, ObjectKey, TensorMemoryObj
from lmserde.l2 import create_serde_chain
from lmserde.testing import wait_for_result

LAYOUT = MemoryLayoutDesc([[2, 4, 64, 128]], [torch.bfloat16])
KEYS = [ObjectKey(bytes([i + 1]) * 32, "test/model", 0x01010101, 0, "tenant") for i in range(3)]


def _objects() -> list[TensorMemoryObj]:
    gen = torch.Generator().manual_seed(2)
    return [TensorMemoryObj.from_tensor(torch.randn([2, 4, 64, 128], generator=gen)
                                        .to(torch.bfloat16)) for _ in KEYS]


def _round_trip(chain: list[dict]) -> tuple[list[int], list[TensorMemoryObj]]:
    proc = create_serde_chain(chain)
    try:
        srcs = _objects()
        size = proc.serializer.estimate_serialized_size(LAYOUT)
        dsts = [TensorMemoryObj.from_tensor(torch.zeros(size, dtype=torch.uint8)) for _ in srcs]
        assert wait_for_result(proc, proc.submit_serialize(srcs, dsts, KEYS), serialize=True)
        sizes = [d.get_size() for d in dsts]
        outs = [TensorMemoryObj.allocate(LAYOUT, zero=True) for _ in srcs]
        assert wait_for_result(proc, proc.submit_deserialize(dsts, outs, KEYS), serialize=False)
        return sizes, outs
    finally:
        proc.close()


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "master.key"
    path.write_bytes(os.urandom(32))
    path.chmod(0o600)
    return path


def test_fp8_then_zstd_compresses_the_codes_and_decodes_like_fp8() -> None:
    pytest.importorskip("lmserde_fp8")
    sizes, outs = _round_trip([{"type": "fp8"}, {"type": "zstd"}])
    raw = LAYOUT.nbytes
    assert all(s < raw // 2 for s in sizes), f"[fp8, zstd] stored {sizes}, fp8 alone {raw // 2}"
    for src, out in zip(_objects(), outs):
        expected = src.tensor.to(torch.float8_e4m3fn).to(torch.bfloat16)
        assert torch.equal(out.tensor, expected)


def test_zstd_then_aesgcm_round_trips_bit_exact_and_keeps_the_saving(key_file: Path) -> None:
    pytest.importorskip("lmserde_aesgcm")
    chain = [{"type": "zstd"}, {"type": "aesgcm", "master_key_path": str(key_file)}]
    sizes, outs = _round_trip(chain)
    alone, _ = _round_trip([{"type": "zstd"}])
    # the chain hands aesgcm only what zstd wrote (plus its 8-byte length), so the encrypted
    # object is the compressed one plus aesgcm's fixed overhead, never the padded bound
    overhead = {s - a for s, a in zip(sizes, alone)}
    assert len(overhead) == 1 and 8 < overhead.pop() <= 8 + 64
    assert all(s < LAYOUT.nbytes * 0.8 for s in sizes), sizes
    for src, out in zip(_objects(), outs):
        assert bytes(out.byte_array) == bytes(src.byte_array)


def test_aesgcm_then_zstd_is_refused_at_config_time(key_file: Path) -> None:
    pytest.importorskip("lmserde_aesgcm")
    with pytest.raises(ValueError, match="zstd") as info:
        create_serde_chain([{"type": "aesgcm", "master_key_path": str(key_file)},
                            {"type": "zstd"}])
    assert "cipher" in str(info.value).lower() or "encrypt" in str(info.value).lower()
