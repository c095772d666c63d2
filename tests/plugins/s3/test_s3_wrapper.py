"""Every shipped serde and a chain through ``SerdeL2AdapterWrapper`` on the s3 adapter, and
``lmserde bench --adapter '{"type": "s3", ...}'``.

Each case stores KV objects through ``create_l2_adapter({"type": "s3", ..., "serde": ...}, l1)``,
checks what the bucket holds, drops the sources, loads into fresh objects and checks the values
with the serde's own accuracy contract.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import raw_client
from lmserde import MemoryLayoutDesc, TensorMemoryObj
from lmserde.cli.main import main as lmserde_main
from lmserde.l1 import L1Manager
from lmserde.l2 import FRAME_HEADER_BYTES, load_sync, lookup_sync, store_sync
from lmserde_s3.local_server import LocalS3Server
from s3_kv import KV_LAYOUT, LAYOUT, NBYTES, kv_object, make_key, sentinel

Check = Callable[[TensorMemoryObj, TensorMemoryObj], bool]


def exact(out: TensorMemoryObj, src: TensorMemoryObj) -> bool:
    return bytes(out.byte_array) == bytes(src.byte_array)


def fp8_cast(out: TensorMemoryObj, src: TensorMemoryObj) -> bool:
    return torch.equal(out.tensor, src.tensor.to(torch.float8_e4m3fn).to(src.tensor.dtype))


def close_to(limit: float) -> Check:
    def check(out: TensorMemoryObj, src: TensorMemoryObj) -> bool:
        x, y = src.tensor.float(), out.tensor.float()
        return (torch.linalg.vector_norm(y - x) / torch.linalg.vector_norm(x)).item() < limit
    return check


def k_exact_v_close(out: TensorMemoryObj, src: TensorMemoryObj) -> bool:
    x, y = src.get_tensor(1).float(), out.get_tensor(1).float()
    v_ok = (torch.linalg.vector_norm(y - x) / torch.linalg.vector_norm(x)).item() < 0.05
    return torch.equal(out.get_tensor(0), src.get_tensor(0)) and v_ok


@dataclass
class Case:
    name: str
    plugins: tuple[str, ...]
    serde: Any
    check: Check
    layout: MemoryLayoutDesc = LAYOUT
    stored_size: int | None = None


CASES = [
    Case("identity", (), {"type": "identity"}, exact, stored_size=NBYTES),
    Case("fp8", ("lmserde_fp8",), {"type": "fp8"}, fp8_cast, stored_size=NBYTES // 2),
    Case("aesgcm", ("lmserde_aesgcm",), {"type": "aesgcm"}, exact),
    Case("turboquant", ("lmserde_turboquant",),
         {"type": "turboquant", "head_dim": 32, "skip_first_layers": 1, "skip_last_layers": 1},
         close_to(0.1)),
    Case("asym_k16_v8", ("lmserde_asym_k16_v8",), {"type": "asym_k16_v8"}, k_exact_v_close,
         layout=KV_LAYOUT),
    Case("fp8+aesgcm", ("lmserde_fp8", "lmserde_aesgcm"),
         [{"type": "fp8"}, {"type": "aesgcm", "frame_version": 1}], fp8_cast,
         stored_size=NBYTES // 2 + 29),
]


def _with_key_file(serde: Any, key_file: Path) -> Any:
    if isinstance(serde, list):
        return [_with_key_file(s, key_file) for s in serde]
    if serde["type"] == "aesgcm":
        return {**serde, "master_key_path": str(key_file)}
    return serde


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_store_drop_load_through_the_wrapper(
    case: Case, make_s3_adapter: Callable[..., Any], key_file: Path,
) -> None:
    for plugin in case.plugins:
        pytest.importorskip(plugin, reason=f"serde plugin {plugin} is not installed")
    l1 = L1Manager(64 << 20)
    adapter = make_s3_adapter(l1=l1, serde=_with_key_file(case.serde, key_file))
    keys = [make_key(i, salt="tenant-a") for i in range(3)]
    objs = [kv_object(i, case.layout) for i in range(3)]
    expected = [kv_object(i, case.layout) for i in range(3)]
    result = store_sync(adapter, keys, objs)
    assert result.is_successful()
    del objs  # dropped: the loads below can only come from the bucket
    sizes = adapter.get_object_sizes(keys)
    assert set(sizes) == set(keys)
    assert result.bytes_transferred() == sum(sizes.values())
    if case.stored_size is not None:
        assert set(sizes.values()) == {FRAME_HEADER_BYTES + case.stored_size}  # frame + payload
    assert set(adapter.inner_adapter.list_l2_keys()) == set(keys)
    assert lookup_sync(adapter, keys).count() == 3
    adapter.submit_unlock(keys)
    outs = [sentinel(case.layout) for _ in keys]
    assert load_sync(adapter, keys, outs).count() == 3
    for out, src in zip(outs, expected):
        assert case.check(out, src)
    assert l1.memory_used_bytes() == 0, "serde temporaries leaked"


def test_a_tampered_object_is_a_miss_for_that_key(
    make_s3_adapter: Callable[..., Any], s3_server: LocalS3Server, bucket: str, key_file: Path,
) -> None:
    pytest.importorskip("lmserde_aesgcm")

    l1 = L1Manager(64 << 20)
    adapter = make_s3_adapter(l1=l1, serde={"type": "aesgcm", "master_key_path": str(key_file)})
    keys = [make_key(i) for i in range(3)]
    assert store_sync(adapter, keys, [kv_object(i) for i in range(3)]).is_successful()
    _, name = adapter.inner_adapter.location_of(keys[1])
    client = raw_client(s3_server)
    blob = bytearray(client.get_object(Bucket=bucket, Key=name)["Body"].read())
    blob[-1] ^= 0x01
    client.put_object(Bucket=bucket, Key=name, Body=bytes(blob))
    outs = [sentinel() for _ in keys]
    assert load_sync(adapter, keys, outs).to_list() == [True, False, True]
    assert exact(outs[0], kv_object(0)) and exact(outs[2], kv_object(2))
    assert l1.memory_used_bytes() == 0


def test_lmserde_bench_runs_on_the_s3_adapter(
    s3_server: LocalS3Server, bucket: str, capsys: pytest.CaptureFixture[str],
) -> None:
    adapter = json.dumps({"type": "s3", "bucket": bucket, "endpoint_url": s3_server.endpoint_url,
                          "prefix": "bench"})
    code = lmserde_main(["bench", "--model", "tiny", "--chunks", "2", "--repeat", "1", "--json",
                         "--serde", "identity", "--adapter", adapter])
    out = capsys.readouterr().out
    assert code == 0, out
    rows = json.loads(out)["results"]
    assert [r["status"] for r in rows] == ["ok"]
