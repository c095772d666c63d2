"""lmserde serdes inside LMCache's own ``SerdeL2AdapterWrapper`` with LMCache's ``fs`` adapter.

LMCache's L1Manager provides the KV objects and the wrapper's temporary buffers; the serde is
configured by the name ``register_lmserde_serdes`` gave it. The files LMCache writes are checked
against LMCache's own decoders, and data written by LMCache's built-in fp8 loads through ours.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("lmcache", reason="the interop session installs lmcache==0.5.6")

import torch
from lmcache_objects import (
    fill_seeded,
    lmcache_key,
    lmcache_layout,
    release,
    reserve_objects,
    wait_load,
    wait_store,
)
from lmserde import MemoryLayoutDesc, TensorMemoryObj
from lmserde.lmcache import register_lmserde_serdes

SHAPE = [2, 4, 16, 32]
N = 3


@pytest.fixture
def wrapped(tmp_path: Path, lmcache_l1: Any) -> Iterator[Any]:
    """``wrapped(serde_type, **kwargs)``: LMCache's wrapper around LMCache's fs adapter."""
    from lmcache.v1.distributed.l2_adapters.fs_l2_adapter import FSL2Adapter, FSL2AdapterConfig
    from lmcache.v1.distributed.l2_adapters.serde_wrapper import SerdeL2AdapterWrapper
    from lmcache.v1.distributed.serde import SerdeConfig, create_serde_processor

    adapters: list[Any] = []

    def make(serde_type: str, **kwargs: Any) -> Any:
        inner = FSL2Adapter(FSL2AdapterConfig(base_path=str(tmp_path / "l2")))
        processor = create_serde_processor(SerdeConfig(type=serde_type, kwargs=kwargs))
        adapter = SerdeL2AdapterWrapper(inner, processor, lmcache_l1)
        adapters.append(adapter)
        return adapter

    yield make
    for adapter in adapters:
        adapter.close()


@pytest.fixture
def kv_objects(lmcache_l1: Any) -> Iterator[Any]:
    """``kv_objects(groups, first_seed)``: N seeded LMCache objects (released afterwards)."""
    reserved: list[Any] = []
    counter = iter(range(10_000))

    def make(groups: int = 1, seed: int | None = 0) -> list[Any]:
        keys = [lmcache_key(5000 + next(counter)) for _ in range(N)]
        objs = reserve_objects(lmcache_l1, keys,
                               lmcache_layout([SHAPE] * groups, [torch.bfloat16] * groups))
        for i, obj in enumerate(objs):
            if seed is None:
                obj.raw_data.fill_(0x5A)
            else:
                fill_seeded(obj, seed + i)
        reserved.extend(keys)
        return objs

    yield make
    release(lmcache_l1, reserved)


def store_and_load(adapter: Any, keys: list[Any], srcs: list[Any], outs: list[Any]
                   ) -> tuple[Any, list[bool]]:
    result = wait_store(adapter, adapter.submit_store_task(keys, srcs))
    hits = wait_load(adapter, adapter.submit_load_task(keys, outs), len(keys))
    return result, hits


def stored_file(base: Path, size: int) -> list[Path]:
    return sorted(p for p in (base / "l2").rglob("*") if p.is_file() and p.stat().st_size == size)


def test_lmserde_fp8_writes_lmcache_fp8_files(wrapped: Any, kv_objects: Any,
                                             tmp_path: Path) -> None:
    pytest.importorskip("lmserde_fp8")
    from lmcache.v1.distributed.serde import Fp8QuantizationDeserializer

    adapter = wrapped(register_lmserde_serdes().lmcache_name("fp8"))
    keys = [lmcache_key(i) for i in range(N)]
    srcs, outs = kv_objects(1, seed=0), kv_objects(1, seed=None)
    result, hits = store_and_load(adapter, keys, srcs, outs)
    numel = srcs[0].get_size() // 2
    assert result.is_successful() and result.bytes_transferred() == N * numel
    assert hits == [True] * N
    for out, src in zip(outs, srcs):
        assert torch.equal(out.tensor, src.tensor.to(torch.float8_e4m3fn).to(torch.bfloat16))
    files = stored_file(tmp_path, numel)
    assert len(files) == N
    blob = files[0].read_bytes()  # LMCache's decoder reads what our serde wrote
    decoded = kv_objects(1, seed=None)[0]
    buf = TensorMemoryObj.from_tensor(torch.frombuffer(bytearray(blob), dtype=torch.uint8))
    Fp8QuantizationDeserializer().deserialize(buf, decoded, keys[0])
    assert any(torch.equal(decoded.tensor, o.tensor) for o in outs)


def test_data_stored_by_lmcache_fp8_loads_through_lmserde_fp8(wrapped: Any,
                                                             kv_objects: Any) -> None:
    pytest.importorskip("lmserde_fp8")
    keys = [lmcache_key(100 + i) for i in range(N)]
    srcs = kv_objects(1, seed=20)
    writer = wrapped("fp8")  # LMCache's built-in serde writes ...
    assert wait_store(writer, writer.submit_store_task(keys, srcs)).is_successful()
    reader = wrapped(register_lmserde_serdes().lmcache_name("fp8"))  # ... ours reads
    outs = kv_objects(1, seed=None)
    assert wait_load(reader, reader.submit_load_task(keys, outs), N) == [True] * N
    for out, src in zip(outs, srcs):
        assert torch.equal(out.tensor, src.tensor.to(torch.float8_e4m3fn).to(torch.bfloat16))


def test_lmserde_aesgcm_v1_round_trip_and_lmcache_decrypts_the_files(
    wrapped: Any, kv_objects: Any, master_key_file: Path,
) -> None:
    pytest.importorskip("lmserde_aesgcm")
    name = register_lmserde_serdes().lmcache_name("aesgcm")
    ours = wrapped(name, master_key_path=str(master_key_file), frame_version=1)
    keys = [lmcache_key(200 + i, salt="tenant-a") for i in range(N)]
    srcs, outs = kv_objects(1, seed=40), kv_objects(1, seed=None)
    result, hits = store_and_load(ours, keys, srcs, outs)
    assert result.is_successful() and hits == [True] * N
    assert all(torch.equal(o.tensor, s.tensor) for o, s in zip(outs, srcs))
    theirs = wrapped("aesgcm", master_key_path=str(master_key_file))  # same files, LMCache's serde
    again = kv_objects(1, seed=None)
    assert wait_load(theirs, theirs.submit_load_task(keys, again), N) == [True] * N
    assert all(torch.equal(o.tensor, s.tensor) for o, s in zip(again, srcs))


def test_lmserde_asym_k16_v8_runs_in_lmcache_wrapper(wrapped: Any, kv_objects: Any) -> None:
    """A multi, upper-bound serde: whole objects are split into K/V slots, output is padded."""
    pytest.importorskip("lmserde_asym_k16_v8")
    adapter = wrapped(register_lmserde_serdes().lmcache_name("asym_k16_v8"))
    keys = [lmcache_key(300 + i) for i in range(N)]
    srcs, outs = kv_objects(2, seed=60), kv_objects(2, seed=None)
    result, hits = store_and_load(adapter, keys, srcs, outs)
    assert result.is_successful() and hits == [True] * N
    for out, src in zip(outs, srcs):
        assert torch.equal(out.get_tensor(0), src.get_tensor(0))  # K bit-exact
        x, y = src.get_tensor(1).float(), out.get_tensor(1).float()
        assert (torch.linalg.vector_norm(y - x) / torch.linalg.vector_norm(x)).item() < 0.05


def test_identity_round_trip(wrapped: Any, kv_objects: Any) -> None:
    adapter = wrapped(register_lmserde_serdes().lmcache_name("identity"))
    keys = [lmcache_key(400 + i) for i in range(N)]
    srcs, outs = kv_objects(1, seed=80), kv_objects(1, seed=None)
    result, hits = store_and_load(adapter, keys, srcs, outs)
    assert result.is_successful() and hits == [True] * N
    layout = MemoryLayoutDesc([SHAPE], [torch.bfloat16])
    assert result.bytes_transferred() == N * layout.nbytes
    assert all(torch.equal(o.tensor, s.tensor) for o, s in zip(outs, srcs))


def test_without_padding_upper_bound_output_misses_on_lmcache_0_5_6(
    tmp_path: Path, lmcache_l1: Any, kv_objects: Any,
) -> None:
    """Why the bridge pads: LMCache 0.5.6's wrapper loads into estimate-sized buffers and its fs
    adapter hits only on exact-length files, so an unpadded upper-bound blob always misses."""
    pytest.importorskip("lmserde_asym_k16_v8")
    from lmcache.v1.distributed.l2_adapters.fs_l2_adapter import FSL2Adapter, FSL2AdapterConfig
    from lmcache.v1.distributed.l2_adapters.serde_wrapper import SerdeL2AdapterWrapper
    from lmserde import SerdeConfig, create_serde_processor
    from lmserde.lmcache import LMCacheProcessorBridge

    results = {}
    for pad in (False, True):
        bridge = LMCacheProcessorBridge(create_serde_processor(SerdeConfig("asym_k16_v8")),
                                        serde_type="asym_k16_v8", pad_to_estimate=pad)
        inner = FSL2Adapter(FSL2AdapterConfig(base_path=str(tmp_path / f"pad-{pad}")))
        adapter = SerdeL2AdapterWrapper(inner, bridge, lmcache_l1)
        try:
            keys = [lmcache_key(500 + i) for i in range(N)]
            result, hits = store_and_load(adapter, keys, kv_objects(2, seed=1),
                                          kv_objects(2, seed=None))
            assert result.is_successful()
            sizes = {p.stat().st_size for p in (tmp_path / f"pad-{pad}").rglob("*.data")}
            results[pad] = (hits, sizes)
        finally:
            adapter.close()
    estimate = bridge.estimate_serialized_size(lmcache_layout([SHAPE] * 2, [torch.bfloat16] * 2))
    assert results[False][0] == [False] * N and max(results[False][1]) < estimate
    assert results[True] == ([True] * N, {estimate})


@pytest.mark.parametrize(("plugin", "serde_type", "kwargs", "limit"), [
    ("lmserde_fp8", "fp8", {"scaling": "per_token"}, 0.1),
    ("lmserde_turboquant", "turboquant",
     {"head_dim": 32, "skip_first_layers": 1, "skip_last_layers": 1}, 0.1),
], ids=["fp8-per-token", "turboquant"])
def test_lmserde_only_formats_round_trip_in_lmcache(
    wrapped: Any, kv_objects: Any, plugin: str, serde_type: str, kwargs: dict[str, Any],
    limit: float,
) -> None:
    pytest.importorskip(plugin)
    adapter = wrapped(register_lmserde_serdes().lmcache_name(serde_type), **kwargs)
    keys = [lmcache_key(600 + i) for i in range(N)]
    srcs, outs = kv_objects(1, seed=90), kv_objects(1, seed=None)
    result, hits = store_and_load(adapter, keys, srcs, outs)
    assert result.is_successful() and hits == [True] * N
    for out, src in zip(outs, srcs):
        x, y = src.tensor.float(), out.tensor.float()
        assert (torch.linalg.vector_norm(y - x) / torch.linalg.vector_norm(x)).item() < limit
