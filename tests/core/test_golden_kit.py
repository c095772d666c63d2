"""``lmserde.testing``'s golden-object kit: write once, never replace, check bit-exactly.

Core only: the ``identity`` serde and a toy keyed serde registered here (``t_golden_xor``: XOR
with a key read from a file that must be owner-only, as ``aesgcm`` requires). The repository's
own golden objects, for every shipped serde, are checked by tests/golden/test_golden.py.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from lmserde import (
    Deserializer,
    MemoryLayoutDesc,
    MemoryObj,
    ObjectKey,
    SerdeOption,
    SerdePair,
    SerdeSizeContract,
    SerdeSpec,
    Serializer,
    as_byte_tensor,
)
from lmserde.registry import register_serde_factory, unregister_serde_factory
from lmserde.testing import (
    DEFAULT_GOLDEN_KEY,
    KEY_DIR,
    GoldenCase,
    GoldenObjectError,
    check_golden_objects,
    write_golden_objects,
)

LAYOUT = MemoryLayoutDesc([[2, 2, 16, 128]], [torch.bfloat16])


def _xor(data: torch.Tensor, key: bytes) -> torch.Tensor:
    pad = torch.tensor(list(key), dtype=torch.uint8).repeat(data.numel() // len(key) + 1)
    return data ^ pad[: data.numel()]


class _XorSerializer(Serializer):
    def __init__(self, key: bytes) -> None:
        self.key = key

    def serialize(self, src: MemoryObj, dst: MemoryObj, key: ObjectKey) -> int:
        data = as_byte_tensor(src)
        as_byte_tensor(dst)[: data.numel()].copy_(_xor(data, self.key))
        return data.numel()

    def estimate_serialized_size(self, layout_desc: MemoryLayoutDesc) -> int:
        return layout_desc.nbytes


class _XorDeserializer(Deserializer):
    def __init__(self, key: bytes) -> None:
        self.key = key

    def deserialize(self, src: MemoryObj, dst: MemoryObj, key: ObjectKey) -> None:
        out = as_byte_tensor(dst)
        out.copy_(_xor(as_byte_tensor(src)[: out.numel()], self.key))


def _xor_pair(kwargs: dict[str, Any]) -> SerdePair:
    path = Path(kwargs["key_path"])
    if path.stat().st_mode & 0o077:
        raise ValueError(f"{path} is readable by others")
    key = path.read_bytes()
    return SerdePair(_XorSerializer(key), _XorDeserializer(key))


XOR_SPEC = SerdeSpec(
    pair_factory=_xor_pair,
    description="XOR with a key file (golden-kit test)",
    options=(SerdeOption("key_path", str, "", "owner-only key file", identity=False),),
    size_contract=SerdeSizeContract.EXACT,
    lossy=False,
)


@pytest.fixture(autouse=True)
def xor_serde() -> Iterator[None]:
    register_serde_factory("t_golden_xor", XOR_SPEC)
    yield
    unregister_serde_factory("t_golden_xor")


def _xor_case(name: str = "xor", key: bytes = b"\x5a\xa5\x0f", **extra: Any) -> GoldenCase:
    return GoldenCase(name, {"type": "t_golden_xor", "key_path": f"{KEY_DIR}/xor.key"}, LAYOUT,
                      seed=3, key_files={"xor.key": key}, **extra)


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_written_objects_are_the_stored_frames_and_check_bit_exactly(tmp_path: Path) -> None:
    cases = [GoldenCase("identity", {"type": "identity"}, LAYOUT, seed=1),
             GoldenCase("identity-raw", {"type": "identity"}, LAYOUT, seed=1, frame=False)]
    assert write_golden_objects(tmp_path, cases) == ["identity", "identity-raw"]
    framed = (tmp_path / "identity.object").read_bytes()
    raw = (tmp_path / "identity-raw.object").read_bytes()
    assert framed[:4] == b"LMSF" and len(framed) == 64 + LAYOUT.nbytes
    assert framed[64:] == raw and len(raw) == LAYOUT.nbytes  # unframed: the serde's bytes alone
    manifest = json.loads((tmp_path / "identity.json").read_text())
    assert manifest["case"] == cases[0].definition()
    assert manifest["placement"] == "object"
    assert manifest["stored_key"]["chunk_hash"] == DEFAULT_GOLDEN_KEY.chunk_hash.hex()
    assert manifest["written_by"]["serdes"]["identity"]["distribution"] == "lmserde"
    # both decode to the same bytes: one shared reference file, the identity of the source
    assert len(list((tmp_path / "references").iterdir())) == 1
    reference = (tmp_path / manifest["files"]["reference"]["path"]).read_bytes()
    assert reference == raw
    assert check_golden_objects(tmp_path, cases) == ["identity", "identity-raw"]


def test_key_files_reach_the_serde_as_private_copies(tmp_path: Path) -> None:
    case = _xor_case()
    write_golden_objects(tmp_path, [case])
    key_file = tmp_path / "keys" / "xor.key"
    key_file.chmod(0o644)  # what a git checkout gives
    assert check_golden_objects(tmp_path, [case]) == ["xor"]
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o644
    key_file.write_bytes(b"\x00\x01\x02")
    with pytest.raises(GoldenObjectError, match="key file .*xor.key is not the file"):
        check_golden_objects(tmp_path)


def test_a_damaged_object_fails_even_with_a_matching_hash(tmp_path: Path) -> None:
    case = GoldenCase("identity", {"type": "identity"}, LAYOUT, seed=1)
    write_golden_objects(tmp_path, [case])
    path = tmp_path / "identity.object"
    data = bytearray(path.read_bytes())
    data[100] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(GoldenObjectError, match="identity: object .*SHA-256 differs"):
        check_golden_objects(tmp_path)
    manifest = json.loads((tmp_path / "identity.json").read_text())
    import hashlib

    manifest["files"]["object"]["sha256"] = hashlib.sha256(bytes(data)).hexdigest()
    (tmp_path / "identity.json").write_text(json.dumps(manifest))
    with pytest.raises(GoldenObjectError, match="identity: the load is a miss.*'checksum'"):
        check_golden_objects(tmp_path)


def test_a_key_or_naming_change_is_reported(tmp_path: Path) -> None:
    case = GoldenCase("identity", {"type": "identity"}, LAYOUT, seed=1)
    write_golden_objects(tmp_path, [case])
    manifest = json.loads((tmp_path / "identity.json").read_text())
    manifest["fs_file_name"] = "renamed.data"
    (tmp_path / "identity.json").write_text(json.dumps(manifest))
    with pytest.raises(GoldenObjectError) as info:
        check_golden_objects(tmp_path)
    assert "names this key" in str(info.value) and "renamed.data" in str(info.value)
    assert "the load is a miss" in str(info.value)


def test_the_writer_never_replaces_and_adds_new_cases(tmp_path: Path) -> None:
    write_golden_objects(tmp_path, [_xor_case()])
    before = _files(tmp_path)
    assert write_golden_objects(tmp_path, [_xor_case()]) == []  # same definition: left alone
    with pytest.raises(FileExistsError, match="another definition.*never regenerated"):
        write_golden_objects(tmp_path, [_xor_case(key=b"\x01\x02")])
    with pytest.raises(FileExistsError, match="xor.key exists with other content"):
        write_golden_objects(tmp_path, [_xor_case("xor-2", key=b"\x01\x02")])
    assert _files(tmp_path) == before
    plain = GoldenCase("plain", {"type": "identity"}, LAYOUT, seed=2)
    assert write_golden_objects(tmp_path, [_xor_case(), plain]) == ["plain"]
    assert all(_files(tmp_path)[name] == data for name, data in before.items())
    assert check_golden_objects(tmp_path) == ["plain", "xor"]


def test_an_interrupted_write_is_not_taken_for_a_case(tmp_path: Path) -> None:
    case = GoldenCase("identity", {"type": "identity"}, LAYOUT, seed=1)
    (tmp_path / "identity.object").write_bytes(b"left over")
    with pytest.raises(FileExistsError, match="without its manifest"):
        write_golden_objects(tmp_path, [case])
    with pytest.raises(GoldenObjectError, match="identity: no golden object"):
        check_golden_objects(tmp_path, [case])


def test_an_empty_or_missing_directory_fails_the_check(tmp_path: Path) -> None:
    with pytest.raises(GoldenObjectError, match="holds no golden objects"):
        check_golden_objects(tmp_path)
    with pytest.raises(GoldenObjectError, match="holds no golden objects"):
        check_golden_objects(tmp_path / "absent")


def test_a_config_today_refuses_is_a_failure_not_a_crash(tmp_path: Path) -> None:
    write_golden_objects(tmp_path, [GoldenCase("identity", {"type": "identity"}, LAYOUT, seed=1)])
    manifest = json.loads((tmp_path / "identity.json").read_text())
    manifest["case"]["serde"] = {"type": "no_such_serde"}
    (tmp_path / "identity.json").write_text(json.dumps(manifest))
    with pytest.raises(GoldenObjectError, match="identity: cannot be checked: .*no_such_serde"):
        check_golden_objects(tmp_path)


@pytest.mark.parametrize("kwargs, message", [
    ({"name": "Bad Name"}, "golden case name"),
    ({"serde": {"type": "identity", "x": float("nan")}}, "must be JSON"),
    ({"serde": {"type": "t_golden_xor", "key_path": f"{KEY_DIR}/missing.key"}},
     r"names key file\(s\) \['missing.key'\]"),
    ({"key_files": {"../escape": b"k"}}, "plain file name"),
    ({"seed": -1}, "seed must be"),
])
def test_bad_cases_are_refused(kwargs: dict[str, Any], message: str) -> None:
    args: dict[str, Any] = {"name": "ok", "serde": {"type": "identity"}, "layout": LAYOUT, **kwargs}
    with pytest.raises(ValueError, match=message):
        GoldenCase(**args)


def test_duplicate_case_names_are_refused(tmp_path: Path) -> None:
    case = GoldenCase("same", {"type": "identity"}, LAYOUT)
    with pytest.raises(ValueError, match="more than once"):
        write_golden_objects(tmp_path, [case, case])
    assert not os.listdir(tmp_path)


def test_a_case_whose_store_fails_writes_nothing(tmp_path: Path) -> None:
    with pytest.raises(GoldenObjectError, match="'xor': the store failed"):
        write_golden_objects(tmp_path, [_xor_case(key=b"")])  # an empty key: serialize raises
    assert not os.listdir(tmp_path)
