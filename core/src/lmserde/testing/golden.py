"""Golden objects: stored objects written once by one release and read by every later one.

:func:`write_golden_objects` stores each :class:`~lmserde.testing.GoldenCase` exactly as a tier
stores it — through ``create_l2_adapter({"type": "fs", ..., "serde": config}, l1)`` into a
private directory — and keeps the file the ``fs`` adapter wrote (frame header + payload, or the
serde's bytes alone for ``frame=False``), the bytes a load of it returns (the *reference*, with
its layout) and a manifest. It never replaces a file: a case whose files exist is refused, new
cases are added. :func:`check_golden_objects` loads every object with today's code, through the
same path, and requires the reference bit-exactly; it also requires every file to be the one
written (SHA-256 in the manifest), so an object regenerated to make a check pass is caught.

Directory layout (everything in it is meant to be committed)::

    <name>.json              manifest: case definition, stored key, fs file name, versions, hashes
    <name>.object            the stored object, byte for byte
    references/<sha256>.bin  decoded references (shared by cases that decode to the same bytes)
    keys/<file>              test-only secrets the configs name as "$GOLDEN_KEYS/<file>"

A split-tier serde (``asym_k16_v8_v_only``) keeps K in L1 and stores only V: its golden object
is the V object the tier writes under the V child key, and its reference is what the tier's V
side decodes (one group, V alone).
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
from collections.abc import Iterable, Iterator, Mapping
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
from lmserde.registry import list_serdes
from lmserde.testing.golden_case import (
    GOLDEN_MANIFEST_FORMAT,
    GoldenCase,
    GoldenObjectError,
    key_from_json,
    key_to_json,
    layout_from_json,
    layout_to_json,
    sha256_hex,
    substitute_key_dir,
)
from lmserde.testing.kit import random_object

__all__ = ["GOLDEN_TIMEOUT_SECONDS", "check_golden_objects", "write_golden_objects"]

#: How long one store or load of a golden object may take before it fails.
GOLDEN_TIMEOUT_SECONDS = 60.0
_L1_BYTES = 1 << 30
_MANIFEST_SUFFIX = ".json"
_OBJECT_SUFFIX = ".object"
_REFERENCES = "references"
_KEYS = "keys"


@dataclass(frozen=True)
class _Loaded:
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
def _tier(base: Path, serde: Any, frame: bool) -> Iterator[L2AdapterInterface]:
    """An ``fs`` tier on ``base`` with ``serde``, its own L1 (never deleting what it refuses)."""
    spec: dict[str, Any] = {"type": "fs", "base_path": str(base), "serde": serde}
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


def _load(definition: Mapping[str, Any], object_bytes: bytes, key_files: Mapping[str, bytes],
          *, written_name: str | None = None, v_key: ObjectKey | None = None) -> _Loaded:
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
        with _tier(base, serde, bool(definition["frame"])) as adapter:
            reader, stored_key, out_layout = _stored_side(adapter, key, layout, v_key)
            name = key_file_name(stored_key)
            (base / (written_name or name)).write_bytes(object_bytes)
            dst = TensorMemoryObj.allocate(out_layout, zero=True, fmt=MemoryFormat.KV_TENSOR)
            bitmap = load_sync(reader, [stored_key], [dst], timeout=GOLDEN_TIMEOUT_SECONDS)
            return _Loaded(bitmap.to_list() == [True], _bytes_of(dst), out_layout, stored_key,
                           name, _metrics(reader))


def _store(case: GoldenCase) -> tuple[bytes, str, ObjectKey, bool]:
    """Store ``case`` through a fresh tier; the stored file's bytes and name, its key, split?"""
    with _private_keys(case.key_files) as keys, \
            tempfile.TemporaryDirectory(prefix="lmserde-golden-store-") as tmp:
        base = Path(tmp) / "l2"
        base.mkdir()
        serde = substitute_key_dir(case.serde, keys)
        with _tier(base, serde, case.frame) as adapter:
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


def _versions(serde: Any) -> dict[str, Any]:
    """The versions of lmserde, torch and the distributions of the serdes ``serde`` names."""
    import torch

    import lmserde

    stages = list(serde) if isinstance(serde, (list, tuple)) else [serde]
    infos = {info.name: info for info in list_serdes()}
    serdes = {}
    for stage in stages:
        info = infos.get(str(stage.get("type")))
        if info is not None:
            serdes[info.name] = {"distribution": info.distribution, "version": info.version}
    return {"lmserde": lmserde.__version__, "serdes": serdes, "torch": torch.__version__,
            "python": platform.python_version()}


def _write_new(path: Path, data: bytes) -> None:
    """Create ``path`` with ``data``; ``FileExistsError`` if it exists (never replaced)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "xb") as f:
        f.write(data)


def _write_shared(path: Path, data: bytes, what: str) -> None:
    """Create ``path`` unless it already holds exactly ``data``; refuse other content."""
    if path.exists():
        if path.read_bytes() != data:
            raise FileExistsError(f"{path} exists with other content than {what}: golden files are "
                                  "never replaced (give the new file another name)")
        return
    _write_new(path, data)


def _case_files(directory: Path, name: str) -> list[Path]:
    return [directory / (name + _MANIFEST_SUFFIX), directory / (name + _OBJECT_SUFFIX)]


def write_golden_objects(directory: str | os.PathLike[str], cases: Iterable[GoldenCase],
                         ) -> list[str]:
    """Write the golden objects of the ``cases`` not yet in ``directory``; return their names.

    A case whose files already exist is skipped when its manifest records the same definition,
    and refused (``FileExistsError``) when anything else is there: golden objects are written
    once and never regenerated. Each new case is stored through the real data path, loaded back
    through a fresh tier (which must hit), and recorded; its manifest is written last, so an
    interrupted run leaves no half-recorded case that a check would accept.
    """
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    case_list = list(cases)
    names = [c.name for c in case_list]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"golden case name(s) used more than once: {duplicates}")
    written = []
    for case in case_list:
        manifest_path, object_path = _case_files(root, case.name)
        if manifest_path.exists():
            recorded = json.loads(manifest_path.read_text())
            if recorded.get("case") != case.definition():
                raise FileExistsError(
                    f"golden case {case.name!r} exists in {root} with another definition: a "
                    "golden object is never regenerated; to record a format change add a case "
                    "with a new name and keep this one")
            continue
        if object_path.exists():
            raise FileExistsError(
                f"{object_path} exists without its manifest (an interrupted write?): golden "
                "files are never replaced; remove it by hand if it was never committed")
        written.append(_write_case(root, case))
    return written


def _write_case(root: Path, case: GoldenCase) -> str:
    data, file_name, stored_key, split = _store(case)
    definition = case.definition()
    loaded = _load(definition, data, case.key_files, v_key=stored_key if split else None)
    if not loaded.hit:
        raise GoldenObjectError(f"golden case {case.name!r}: its object, just written, does not "
                                f"load through a fresh tier: {_miss_reason(loaded.metrics)}")
    reference_sha = sha256_hex(loaded.data)
    reference_rel = f"{_REFERENCES}/{reference_sha}.bin"
    key_entries = {}
    for key_name, content in sorted(case.key_files.items()):
        _write_shared(root / _KEYS / key_name, content, f"key file {key_name!r} of {case.name!r}")
        key_entries[key_name] = {"path": f"{_KEYS}/{key_name}", "sha256": sha256_hex(content)}
    _write_shared(root / reference_rel, loaded.data, f"reference {reference_sha}")
    _write_new(root / (case.name + _OBJECT_SUFFIX), data)
    manifest = {
        "lmserde_golden_object": GOLDEN_MANIFEST_FORMAT,
        "name": case.name,
        "description": case.description,
        "case": definition,
        "placement": "split_tier_v" if split else "object",
        "stored_key": key_to_json(stored_key),
        "fs_file_name": file_name,
        "reference_layout": layout_to_json(loaded.layout),
        "files": {
            "object": {"path": case.name + _OBJECT_SUFFIX, "sha256": sha256_hex(data),
                       "bytes": len(data)},
            "reference": {"path": reference_rel, "sha256": reference_sha,
                          "bytes": len(loaded.data)},
        },
        "key_files": key_entries,
        "written_by": _versions(case.serde),
    }
    text = json.dumps(manifest, indent=2, sort_keys=True) + "\n"
    _write_new(root / (case.name + _MANIFEST_SUFFIX), text.encode())
    return case.name


def _read_file(root: Path, entry: Mapping[str, Any], what: str, problems: list[str]) -> bytes | None:
    path = root / str(entry["path"])
    try:
        data = path.read_bytes()
    except OSError as exc:
        problems.append(f"{what} {path} cannot be read: {exc.strerror or exc}")
        return None
    if sha256_hex(data) != entry["sha256"]:
        problems.append(f"{what} {path} is not the file that was written (SHA-256 differs from the "
                        "manifest): golden files are never regenerated or edited")
        return None
    return data


def _miss_reason(metrics: Mapping[str, Any]) -> str:
    """Why the wrapper missed, from its metrics (reasons: docs/formats/stored-object.md)."""
    rejected = sorted(k for k, n in (metrics.get("rejections") or {}).items() if n)
    if rejected:
        return "refused as " + ", ".join(repr(r) for r in rejected) + " (stored-object check)"
    failed = sorted(k for k, n in (metrics.get("failures") or {}).items() if n)
    if failed:
        return "failed in " + ", ".join(failed)
    return "no reason reported (the adapter did not find the object)"


def _first_difference(a: bytes, b: bytes) -> str:
    if len(a) != len(b):
        return f"{len(a)} bytes decoded, the reference has {len(b)}"
    index = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
    count = sum(x != y for x, y in zip(a, b))
    return f"{count} of {len(a)} bytes differ, the first at offset {index}"


def _check_one(root: Path, manifest: Mapping[str, Any]) -> list[str]:
    """Every problem of one recorded case (empty: it reads back bit-exactly)."""
    problems: list[str] = []
    if manifest.get("lmserde_golden_object") != GOLDEN_MANIFEST_FORMAT:
        return [f"unknown manifest format {manifest.get('lmserde_golden_object')!r}"]
    files = manifest["files"]
    data = _read_file(root, files["object"], "object", problems)
    reference = _read_file(root, files["reference"], "reference", problems)
    key_files = {}
    for name, entry in manifest["key_files"].items():
        content = _read_file(root, entry, "key file", problems)
        if content is not None:
            key_files[name] = content
    if problems or data is None or reference is None:
        return problems
    v_key = (key_from_json(manifest["stored_key"])
             if manifest.get("placement") == "split_tier_v" else None)
    try:
        loaded = _load(manifest["case"], data, key_files, written_name=manifest["fs_file_name"],
                       v_key=v_key)
    except GoldenObjectError as exc:
        return [*problems, str(exc)]
    if key_to_json(loaded.stored_key) != manifest["stored_key"]:
        problems.append(f"today's code stores this key under {key_to_json(loaded.stored_key)}, "
                        f"the object was written under {manifest['stored_key']}")
    if loaded.file_name != manifest["fs_file_name"]:
        problems.append(f"the fs adapter names this key {loaded.file_name!r} today, the object was "
                        f"written as {manifest['fs_file_name']!r}")
    if layout_to_json(loaded.layout) != manifest["reference_layout"]:
        problems.append(f"decoded into layout {layout_to_json(loaded.layout)}, the reference is "
                        f"{manifest['reference_layout']}")
    if not loaded.hit:
        problems.append(f"the load is a miss with today's code: {_miss_reason(loaded.metrics)}")
    elif loaded.data != reference:
        problems.append("the decode is not the reference: " + _first_difference(loaded.data,
                                                                                  reference))
    return problems


def _manifests(root: Path) -> dict[str, dict[str, Any]]:
    out = {}
    for path in sorted(root.glob("*" + _MANIFEST_SUFFIX)):
        out[path.name[: -len(_MANIFEST_SUFFIX)]] = json.loads(path.read_text())
    return out


def check_golden_objects(directory: str | os.PathLike[str],
                         cases: Iterable[GoldenCase] | None = None) -> list[str]:
    """Load every golden object in ``directory`` with today's code; return the names checked.

    Each object is loaded through a fresh ``fs`` tier built from its manifest's config and key;
    the decode must equal the reference bit-exactly, and every file must have the SHA-256 the
    manifest records. With ``cases``, each case must be present with the definition it was
    written with (a deleted or edited case fails). Raises :class:`GoldenObjectError` listing
    every failing case; a directory without golden objects fails too.
    """
    root = Path(directory)
    manifests = _manifests(root) if root.is_dir() else {}
    failures: dict[str, list[str]] = {}
    for case in cases or ():
        recorded = manifests.get(case.name)
        if recorded is None:
            failures[case.name] = [f"no golden object in {root}: write it once with "
                                   "write_golden_objects"]
        elif recorded.get("case") != case.definition():
            failures[case.name] = ["its definition differs from the one its golden object was "
                                   "written with: a golden case is never changed (add a new one)"]
    if not manifests:
        failures.setdefault("*", []).append(f"{root} holds no golden objects")
    for name, manifest in manifests.items():
        try:
            problems = _check_one(root, manifest)
        except Exception as exc:  # a config today's code refuses, a malformed manifest, ...
            problems = [f"cannot be checked: {type(exc).__name__}: {exc}"]
        if problems:
            failures.setdefault(name, []).extend(problems)
    if failures:
        lines = [f"{len(failures)} golden case(s) in {root} failed:"]
        lines += [f"  {name}: {p}" for name, problems in sorted(failures.items()) for p in problems]
        raise GoldenObjectError("\n".join(lines))
    return sorted(manifests)
