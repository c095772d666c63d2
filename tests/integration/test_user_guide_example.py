"""The user guide's store -> drop from L1 -> load example runs as written (in a fresh interpreter)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packaging"))
from doc_examples import doc_example
from lmserde import MemoryLayoutDesc, ObjectKey, TensorMemoryObj
from lmserde.l1 import L1Manager
from lmserde.l2 import FRAME_HEADER_BYTES, create_l2_adapter, load_sync, store_sync


def _run_example(tmp_path: Path, name: str) -> subprocess.CompletedProcess[str]:
    """Run the user guide's example ``name`` in a fresh interpreter; it must exit 0."""
    script = tmp_path / "example.py"
    script.write_text(doc_example("docs/user-guide.md", name))
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                            timeout=120, cwd=tmp_path, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def test_store_drop_load_example_runs(tmp_path: Path) -> None:
    pytest.importorskip("lmserde_fp8", reason="the example uses the fp8 plugin")
    result = _run_example(tmp_path, "store-drop-load")
    lines = result.stdout.splitlines()
    size = 16 * 2 * 8 * 128
    assert lines[0] == f"stored {size + FRAME_HEADER_BYTES} bytes of {2 * size}"  # + the frame
    error = float(lines[1].split()[-1])
    assert 0.0 < error < 0.1
    assert "Warning" not in result.stderr, result.stderr


def test_the_extractor_finds_only_marked_blocks() -> None:
    with pytest.raises(LookupError, match="no example 'nope'"):
        doc_example("docs/user-guide.md", "nope")


def test_change_serde_example_runs(tmp_path: Path) -> None:
    pytest.importorskip("lmserde_fp8", reason="the example uses the fp8 plugin")
    pytest.importorskip("lmserde_zstd", reason="the example uses the zstd plugin")
    result = _run_example(tmp_path, "change-serde")
    assert result.stdout.splitlines() == ["read_also hits: 4", "migrated: 4 failed: 0",
                                          "hits without read_also: 4"]
    assert "Warning" not in result.stderr, result.stderr


def test_auto_serde_example_runs(tmp_path: Path) -> None:
    pytest.importorskip("lmserde_zstd", reason="the example chooses between raw bytes and zstd")
    result = _run_example(tmp_path, "auto-serde")
    assert result.stdout.splitlines() == ["stores new objects with: zstd",
                                          "measured store bandwidth under 100 MB/s: True",
                                          "objects: 16"]
    assert "Warning" not in result.stderr, result.stderr


def _guide_config(name: str, tmp_path: Path) -> dict[str, Any]:
    """The guide's JSON config ``name`` with its paths moved under ``tmp_path``: the keyring
    (tenants tenant-a, tenant-b and "" made with ``lmserde keys rotate``, as the guide does), the
    frame key (``lmserde keygen``) and the tier."""
    from lmserde.cli.main import main

    ring = tmp_path / "keyring.json"
    if not ring.exists():
        for tenant in ("tenant-a", "tenant-b", ""):
            assert main(["keys", "rotate", str(ring), tenant]) == 0
        assert main(["keygen", str(tmp_path / "frame.key")]) == 0
    text = doc_example("docs/user-guide.md", name, lang="json")
    for real, test in (("/var/cache/kv", tmp_path / "kv"), ("/etc/lmcache/keyring.json", ring),
                       ("/etc/lmcache/frame.key", tmp_path / "frame.key")):
        text = text.replace(real, str(test))
    config: dict[str, Any] = json.loads(text)
    return config


_TENANTS = ("tenant-a", "tenant-b", "")
_MODEL = "guide/model-8b"


def _guide_round_trip(config: dict[str, Any]) -> tuple[list[ObjectKey], Any]:
    """Store one object per tenant through ``config`` and load each back: all hits, within fp8's
    error. Returns the keys and the (open) adapter."""
    from lmserde.testing import random_object

    layout = MemoryLayoutDesc([[2, 4, 16, 64]], [torch.bfloat16])
    adapter = create_l2_adapter(config, L1Manager(64 << 20))
    keys = [ObjectKey(bytes([i + 1]) * 32, _MODEL, 0x01010000, 0, t) for i, t in
            enumerate(_TENANTS)]
    objs = [random_object(layout, i) for i in range(len(keys))]
    assert store_sync(adapter, keys, objs).is_successful()
    outs = [TensorMemoryObj.allocate(layout, zero=True) for _ in keys]
    assert load_sync(adapter, keys, outs).to_list() == [True] * len(keys)
    for src, out in zip(objs, outs):
        error = (out.tensor.float() - src.tensor.float()).abs().max().item()
        assert error < 0.2 * src.tensor.float().abs().max().item()
    return keys, adapter


def test_multi_tenant_keyring_config_round_trips_and_shreds(tmp_path: Path) -> None:
    """§8's recommended config: one keyring for aesgcm and the frame; forgetting a tenant makes
    its object an ``unkeyed`` miss at the frame, the others keep hitting."""
    pytest.importorskip("lmserde_fp8")
    pytest.importorskip("lmserde_aesgcm")
    from lmserde.cli.main import main

    config = _guide_config("multi-tenant-keyring", tmp_path)
    keys, adapter = _guide_round_trip(config)
    adapter.close()
    assert main(["tenant", "forget", str(tmp_path / "keyring.json"), "tenant-a"]) == 0
    reader = create_l2_adapter(config, L1Manager(64 << 20))
    try:
        layout = MemoryLayoutDesc([[2, 4, 16, 64]], [torch.bfloat16])
        outs = [TensorMemoryObj.allocate(layout) for _ in keys]
        assert load_sync(reader, keys, outs).to_list() == [False, True, True]
        assert dict(reader.metrics()["rejections"]) == {"unkeyed": 1}
    finally:
        reader.close()


def test_multi_tenant_hidden_names_config_round_trips_without_revealing_names(
        tmp_path: Path) -> None:
    """§8's hidden-names config: every tenant round-trips, no stored name shows a model, chunk
    hash or tenant, and after ``tenant forget`` scrub (listing through the key records) reclaims
    exactly the forgotten tenant's object."""
    pytest.importorskip("lmserde_fp8")
    pytest.importorskip("lmserde_aesgcm")
    from lmserde.cli.main import main
    from lmserde.l2.serde.scrub import scrub_adapter

    config = _guide_config("multi-tenant-hidden-names", tmp_path)
    keys, adapter = _guide_round_trip(config)
    by_tenant = lambda ks: sorted(ks, key=lambda k: k.cache_salt)  # noqa: E731
    try:
        assert by_tenant(adapter.list_l2_keys()) == by_tenant(keys)
    finally:
        adapter.close()
    names = [p.name for p in (tmp_path / "kv").rglob("*")]
    assert len(names) >= len(keys)
    for name in names:
        assert "guide" not in name and "model" not in name and "tenant" not in name
        assert not any(key.chunk_hash.hex() in name for key in keys)
    assert main(["tenant", "forget", str(tmp_path / "keyring.json"), "tenant-a"]) == 0
    reader = create_l2_adapter(config, L1Manager(64 << 20))
    try:
        report = scrub_adapter(reader, delete_unkeyed=True)
        assert report.unkeyed == keys[:1] and report.unkeyed_deleted == 1 and report.ok == 2
        assert by_tenant(reader.list_l2_keys()) == by_tenant(keys[1:])
    finally:
        reader.close()
