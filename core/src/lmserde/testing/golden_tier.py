"""One golden object through a real ``fs`` tier: how it is written, and how it is read back.

Both go through ``create_l2_adapter({"type": "fs", ..., "serde": config}, l1)`` on a private
directory, with the case's test-only key files as private copies (a git checkout makes them
0644; key files must be 0600), and never delete what they refuse (``repair=False``).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lmserde.keys import ObjectKey
from lmserde.l1.manager import L1Manager
from lmserde.l2.adapters.fs import key_file_name
from lmserde.l2.build import create_l2_adapter
from lmserde.l2.contract.interface import L2AdapterInterface
from lmserde.l2.contract.sync_driver import load_sync, store_sync
from lmserde.l2.split.adapter import SplitTierL2Adapter
from lmserde.l2.split.generation import parse_v_child_key
from lmserde.layout import MemoryLayoutDesc
from lmserde.memory import MemoryFormat, MemoryObj, TensorMemoryObj
from lmserde.testing.golden_case import (
    GoldenCase,
    GoldenObjectError,
    key_from_json,
    layout_from_json,
    substitute_key_dir,
)
from lmserde.testing.kit import random_object

__all__ = ["GOLDEN_TIMEOUT_SECONDS", "GoldenLoad", "load_golden_object", "store_golden_object"]

#: How long one store or load of a golden object may take before it fails.
GOLDEN_TIMEOUT_SECONDS = 60.0
_L1_BYTES = 1 << 30

@dataclass(frozen=True)
class GoldenLoad:
    """What one load of a golden object gave."""

    hit: bool
    data: bytes
    layout: MemoryLayoutDesc
    stored_key: ObjectKey
    file_name: str
    metrics: dict[str, Any]


def _bytes_of(obj: MemoryObj) -> bytes:
    return bytes(memoryview(obj.byte_array).cast("B")[: obj.get_size()])


@contextmanager
def _private_keys(key_files: Mapping[str, bytes]) -> Iterator[Path]:
    """A private directory holding ``0600`` copies of ``key_files`` (removed afterwards)."""
    with tempfile.TemporaryDirectory(prefix="lmserde-golden-keys-") as tmp:
        root = Path(tmp)
        root.chmod(0o700)
        for name, content in key_files.items():
            fd = os.open(root / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(content)
        yield root


@contextmanager
def _tier(base: Path, serde: Any, frame: bool, options: Mapping[str, Any] | None = None,
          ) -> Iterator[L2AdapterInterface]:
    """An ``fs`` tier on ``base`` with ``serde`` and further adapter ``options`` (a frame key),
    its own L1 (never deleting what it refuses)."""
    spec: dict[str, Any] = {"type": "fs", "base_path": str(base), "serde": serde,
                            **(options or {})}
    if not frame:
        spec["serde_frame"] = False
    adapter = create_l2_adapter(spec, L1Manager(_L1_BYTES), repair=False)
    try:
        yield adapter
    finally:
        adapter.close()


def _stored_side(adapter: L2AdapterInterface, key: ObjectKey, layout: MemoryLayoutDesc,
                 v_key: ObjectKey | None = None,
                 ) -> tuple[L2AdapterInterface, ObjectKey, MemoryLayoutDesc]:
    """The adapter that reads the stored object, its key and the layout it decodes into.

    A split tier's V object is stored under a key of the store's generation (random per store):
    ``v_key`` is that key, recorded when the object was written (default: the key's live store
    on ``adapter``). Today's code must still parse it as the V half of ``key``."""
    if isinstance(adapter, SplitTierL2Adapter):
        v = adapter.slots.v_group
        stored = v_key if v_key is not None else adapter.v_child_key(key)
        parsed = parse_v_child_key(stored) if stored is not None else None
        if stored is None or parsed is None or parsed[0] != key:
            raise GoldenObjectError(f"{stored} is not a V key of {key} for today's split tier")
        return (adapter.v_adapter, stored,
                MemoryLayoutDesc([layout.shapes[v]], [layout.dtypes[v]]))
    return adapter, key, layout


def _metrics(adapter: L2AdapterInterface) -> dict[str, Any]:
    metrics = getattr(adapter, "metrics", None)
    if not callable(metrics):
        return {}
    snapshot = metrics()
    return {k: snapshot.get(k) for k in ("rejections", "failures") if k in snapshot}


def load_golden_object(definition: Mapping[str, Any], object_bytes: bytes, key_files: Mapping[str, bytes],
          *, written_name: str | None = None, v_key: ObjectKey | None = None) -> GoldenLoad:
    """Load ``object_bytes`` as the case ``definition`` with today's code, from a fresh tier,
    into a zero-filled destination (the reference is that destination's bytes after the load).

    ``written_name``: the fs file name the object was written under; when today's name of the
    stored key differs, the object is placed there (the miss then shows the naming change).
    """
    key = key_from_json(definition["key"])
    layout = layout_from_json(definition["layout"])
    with _private_keys(key_files) as keys, \
            tempfile.TemporaryDirectory(prefix="lmserde-golden-load-") as tmp:
        base = Path(tmp) / "l2"
        base.mkdir()
        serde = substitute_key_dir(definition["serde"], keys)
        options = substitute_key_dir(definition.get("adapter_options", {}), keys)
        with _tier(base, serde, bool(definition["frame"]), options) as adapter:
            reader, stored_key, out_layout = _stored_side(adapter, key, layout, v_key)
            name = key_file_name(stored_key)
            (base / (written_name or name)).write_bytes(object_bytes)
            dst = TensorMemoryObj.allocate(out_layout, zero=True, fmt=MemoryFormat.KV_TENSOR)
            bitmap = load_sync(reader, [stored_key], [dst], timeout=GOLDEN_TIMEOUT_SECONDS)
            return GoldenLoad(bitmap.to_list() == [True], _bytes_of(dst), out_layout, stored_key,
                           name, _metrics(reader))


def store_golden_object(case: GoldenCase) -> tuple[bytes, str, ObjectKey, bool]:
    """Store ``case`` through a fresh tier; the stored file's bytes and name, its key, split?"""
    with _private_keys(case.key_files) as keys, \
            tempfile.TemporaryDirectory(prefix="lmserde-golden-store-") as tmp:
        base = Path(tmp) / "l2"
        base.mkdir()
        serde = substitute_key_dir(case.serde, keys)
        options = substitute_key_dir(dict(case.adapter_options), keys)
        with _tier(base, serde, case.frame, options) as adapter:
            split = isinstance(adapter, SplitTierL2Adapter)
            source = random_object(case.layout, case.seed)
            result = store_sync(adapter, [case.key], [source], timeout=GOLDEN_TIMEOUT_SECONDS)
            if not result.is_successful():
                raise GoldenObjectError(f"golden case {case.name!r}: the store failed "
                                        f"({_metrics(adapter).get('failures') or 'no detail'})")
            _, stored_key, _ = _stored_side(adapter, case.key, case.layout)
        files = sorted(p.name for p in base.iterdir() if p.is_file())
        name = key_file_name(stored_key)
        if files != [name]:
            raise GoldenObjectError(f"golden case {case.name!r}: expected the tier to hold one "
                                    f"file {name!r}, found {files}")
        return (base / name).read_bytes(), name, stored_key, split


