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
is the V object the tier writes under the V child key of its store generation, and its reference
is what the tier's V side decodes (one group, V alone). How one object is written and read
through a real ``fs`` tier is :mod:`lmserde.testing.golden_tier`.
"""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from lmserde.registry import list_serdes
from lmserde.testing.golden_case import (
    GOLDEN_MANIFEST_FORMAT,
    GoldenCase,
    GoldenObjectError,
    key_from_json,
    key_to_json,
    layout_to_json,
    sha256_hex,
)
from lmserde.testing.golden_tier import (
    GOLDEN_TIMEOUT_SECONDS,
    load_golden_object,
    store_golden_object,
)

__all__ = ["GOLDEN_TIMEOUT_SECONDS", "check_golden_objects", "write_golden_objects"]


_MANIFEST_SUFFIX = ".json"
_OBJECT_SUFFIX = ".object"
_REFERENCES = "references"
_KEYS = "keys"


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
    data, file_name, stored_key, split = store_golden_object(case)
    definition = case.definition()
    loaded = load_golden_object(definition, data, case.key_files, v_key=stored_key if split else None)
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
        loaded = load_golden_object(manifest["case"], data, key_files,
                                    written_name=manifest["fs_file_name"], v_key=v_key)
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
