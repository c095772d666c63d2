"""Format stability: every golden object in tests/golden/objects/ reads back bit-exactly today.

The objects were written once by an earlier version (``write_golden.py``); they are never
regenerated to make this pass. A failure here means today's code cannot read what that version
stored: every existing L2 tier would turn into misses (docs/compatibility.md says what to do).
The damage tests run the same check on copies of the directory to show it cannot pass on
changed bytes, replaced files or edited cases.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from lmserde import get_serde_spec
from lmserde.registry import list_serdes
from lmserde.testing import GoldenCase, GoldenObjectError, check_golden_objects, write_golden_objects

pytest.importorskip("lmserde_fp8")
pytest.importorskip("lmserde_aesgcm")
pytest.importorskip("lmserde_turboquant")
pytest.importorskip("lmserde_asym_k16_v8")
pytest.importorskip("lmserde_zstd")

from write_golden import CASES, GOLDEN_DIR, KV

#: The distributions of this repository whose serdes must all have golden objects.
SHIPPED_DISTRIBUTIONS = {"lmserde", "lmserde-fp8", "lmserde-aesgcm", "lmserde-turboquant",
                         "lmserde-asym-k16-v8", "lmserde-zstd"}


def _stages(case: GoldenCase) -> list[dict[str, Any]]:
    return [dict(s) for s in (case.serde if isinstance(case.serde, list) else [case.serde])]


def _values(serde_type: str, option: str) -> set[Any]:
    """Every value ``option`` takes in a case's stage of ``serde_type`` (defaults included)."""
    default = next(o.default for o in get_serde_spec(serde_type).options if o.name == option)
    return {stage.get(option, default) for case in CASES for stage in _stages(case)
            if stage["type"] == serde_type}


def _copy_cases(tmp_path: Path, names: Iterable[str]) -> Path:
    """A golden directory holding only the ``names`` cases of the real one (files copied)."""
    target = tmp_path / "golden"
    for name in names:
        manifest = json.loads((GOLDEN_DIR / f"{name}.json").read_text())
        paths = [f"{name}.json", *(e["path"] for e in manifest["files"].values()),
                 *(e["path"] for e in manifest["key_files"].values())]
        for rel in paths:
            (target / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(GOLDEN_DIR / rel, target / rel)
    return target


def _manifest(root: Path, name: str) -> dict[str, Any]:
    return json.loads((root / f"{name}.json").read_text())


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x10
    path.write_bytes(bytes(data))


def _rehash(root: Path, name: str, which: str) -> None:
    """Record the current file's SHA-256 in the manifest (as a careless regeneration would)."""
    import hashlib

    manifest = _manifest(root, name)
    entry = manifest["files"][which]
    entry["sha256"] = hashlib.sha256((root / entry["path"]).read_bytes()).hexdigest()
    (root / f"{name}.json").write_text(json.dumps(manifest))


def _case(name: str) -> GoldenCase:
    return next(c for c in CASES if c.name == name)


# -- the promise --------------------------------------------------------------------------------

def test_every_golden_object_reads_back_bit_exactly() -> None:
    checked = check_golden_objects(GOLDEN_DIR, CASES)
    assert set(checked) >= {c.name for c in CASES}


def test_the_golden_directory_stays_small() -> None:
    total = sum(p.stat().st_size for p in GOLDEN_DIR.rglob("*") if p.is_file())
    assert total < 3 << 20, f"tests/golden/objects holds {total} bytes"


def test_every_shipped_serde_has_golden_objects_alone_and_in_a_chain() -> None:
    shipped = {s.name for s in list_serdes() if s.distribution in SHIPPED_DISTRIBUTIONS}
    assert {"identity", "fp8", "aesgcm", "turboquant", "asym_k16_v8", "asym_k16_v8_v_only",
            "zstd"} <= shipped
    alone = {c.serde["type"] for c in CASES if isinstance(c.serde, dict)}
    assert shipped <= alone, f"no golden case of {sorted(shipped - alone)}"
    chained = {s["type"] for c in CASES if isinstance(c.serde, list) for s in c.serde}
    assert {"fp8", "zstd", "aesgcm", "turboquant", "asym_k16_v8", "identity"} <= chained


def test_every_byte_changing_choice_has_a_golden_case() -> None:
    """Each value of every identity option with declared choices (fp8 scaling, zstd codec and
    shuffle, ...) is pinned; so are the values of options checked by a function."""
    for info in list_serdes():
        if info.distribution not in SHIPPED_DISTRIBUTIONS:
            continue
        for option in get_serde_spec(info.name).options:
            if option.identity and option.choices:
                missing = set(option.choices) - _values(info.name, option.name)
                assert not missing, f"{info.name}.{option.name}: no golden case for {missing}"
    from lmserde_aesgcm.serde import FRAME_VERSIONS
    from lmserde_turboquant.presets import PRESETS

    assert set(PRESETS) <= _values("turboquant", "preset")
    assert {"float8_e4m3fn", "float8_e5m2"} <= _values("fp8", "fp8_dtype")
    # written with one value, read whatever the option says now: each version is its own format
    assert set(FRAME_VERSIONS) <= _values("aesgcm", "frame_version")
    assert {128, 256} <= _values("aesgcm", "aes_bits")
    assert {"hkdf", "keyring"} <= _values("aesgcm", "key_provider")
    assert {"auto", "torch"} <= _values("turboquant", "backend")


def test_aesgcm_cases_pin_their_frame_version() -> None:
    for case in CASES:
        for stage in _stages(case):
            if stage["type"] == "aesgcm":
                assert "frame_version" in stage, f"{case.name}: a later default would change it"


# -- the check cannot pass on anything but the files that were written -------------------------

def test_a_flipped_object_byte_fails_the_check(tmp_path: Path) -> None:
    root = _copy_cases(tmp_path, ["fp8-e4m3-none", "identity-bf16"])
    assert check_golden_objects(root) == ["fp8-e4m3-none", "identity-bf16"]
    _flip(root / "fp8-e4m3-none.object", 200)
    with pytest.raises(GoldenObjectError, match="fp8-e4m3-none: object .*SHA-256 differs"):
        check_golden_objects(root)


def test_a_flipped_payload_byte_with_a_rehashed_manifest_is_still_caught(tmp_path: Path) -> None:
    """Even a manifest updated along with the object: the frame's checksum refuses the load."""
    root = _copy_cases(tmp_path, ["zstd-planes-byte-l1"])
    _flip(root / "zstd-planes-byte-l1.object", 1000)
    _rehash(root, "zstd-planes-byte-l1", "object")
    with pytest.raises(GoldenObjectError,
                       match="zstd-planes-byte-l1: the load is a miss.*refused as 'checksum'"):
        check_golden_objects(root)


def test_a_changed_unframed_payload_is_caught_by_the_reference(tmp_path: Path) -> None:
    root = _copy_cases(tmp_path, ["identity-unframed"])
    _flip(root / "identity-unframed.object", 4096)
    _rehash(root, "identity-unframed", "object")
    with pytest.raises(GoldenObjectError, match="not the reference: 1 of 32768 bytes differ, "
                                                "the first at offset 4096"):
        check_golden_objects(root)


def test_a_flipped_reference_byte_fails_the_check(tmp_path: Path) -> None:
    root = _copy_cases(tmp_path, ["turboquant-tq3"])
    reference = root / _manifest(root, "turboquant-tq3")["files"]["reference"]["path"]
    _flip(reference, 7)
    with pytest.raises(GoldenObjectError, match="turboquant-tq3: reference .*SHA-256 differs"):
        check_golden_objects(root)
    _rehash(root, "turboquant-tq3", "reference")
    with pytest.raises(GoldenObjectError, match="not the reference: 1 of .* offset 7"):
        check_golden_objects(root)


def test_a_regenerated_object_is_caught(tmp_path: Path) -> None:
    """A fresh aesgcm object of the same case is valid (new IV) but is not the one written."""
    root = _copy_cases(tmp_path, ["aesgcm-v2-aes128-hkdf"])
    fresh = tmp_path / "fresh"
    assert write_golden_objects(fresh, [_case("aesgcm-v2-aes128-hkdf")]) == ["aesgcm-v2-aes128-hkdf"]
    check_golden_objects(fresh)  # the regenerated object itself reads fine
    shutil.copyfile(fresh / "aesgcm-v2-aes128-hkdf.object", root / "aesgcm-v2-aes128-hkdf.object")
    with pytest.raises(GoldenObjectError, match="aesgcm-v2-aes128-hkdf: object .*SHA-256"):
        check_golden_objects(root)


def test_a_replaced_key_file_fails_the_check(tmp_path: Path) -> None:
    root = _copy_cases(tmp_path, ["aesgcm-v1-aes128-hkdf"])
    (root / "keys" / "master.key").write_bytes(bytes(32))
    with pytest.raises(GoldenObjectError, match="key file .*master.key is not the file"):
        check_golden_objects(root)


def test_key_files_are_read_from_private_copies_whatever_their_mode(tmp_path: Path) -> None:
    """A checkout gives key files 0644 (git keeps no 0600): aesgcm still gets 0600 copies."""
    names = ["aesgcm-v2-keyring-v2-tenant", "chain-fp8-zstd-aesgcm-v2"]
    root = _copy_cases(tmp_path, names)
    for path in (root / "keys").iterdir():
        path.chmod(0o644)
    assert check_golden_objects(root) == sorted(names)
    assert all(p.stat().st_mode & 0o777 == 0o644 for p in (root / "keys").iterdir())


def test_a_removed_or_edited_case_fails_the_check(tmp_path: Path) -> None:
    root = _copy_cases(tmp_path, ["fp8-e4m3-none"])
    with pytest.raises(GoldenObjectError, match="fp8-e5m2-none: no golden object"):
        check_golden_objects(root, [_case("fp8-e4m3-none"), _case("fp8-e5m2-none")])
    edited = GoldenCase("fp8-e4m3-none", {"type": "fp8", "scaling": "per_tensor"}, KV, seed=1)
    with pytest.raises(GoldenObjectError, match="fp8-e4m3-none: its definition differs"):
        check_golden_objects(root, [edited])


def test_the_generator_never_replaces_a_golden_file(tmp_path: Path) -> None:
    root = _copy_cases(tmp_path, ["fp8-e4m3-none"])
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    assert write_golden_objects(root, [_case("fp8-e4m3-none")]) == []
    edited = GoldenCase("fp8-e4m3-none", {"type": "fp8", "scaling": "per_tensor"}, KV, seed=1)
    with pytest.raises(FileExistsError, match="never regenerated"):
        write_golden_objects(root, [edited])
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before
    added = GoldenCase("fp8-e4m3-per_tensor-new", {"type": "fp8", "scaling": "per_tensor"}, KV,
                       seed=1)
    assert write_golden_objects(root, [_case("fp8-e4m3-none"), added]) == [added.name]
    assert check_golden_objects(root) == ["fp8-e4m3-none", added.name]
