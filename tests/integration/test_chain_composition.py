"""Issue #13, case 6: chains of the shipped plugins that cannot work are refused at config time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from lmserde import DataKind, get_serde_spec
from lmserde.bench.serde_selection import BenchInputError, validate_serde_config
from lmserde.l1 import L1Manager
from lmserde.l2 import create_l2_adapter
from lmserde.serde_chain import create_serde_chain

pytest.importorskip("lmserde_fp8")
pytest.importorskip("lmserde_aesgcm")
pytest.importorskip("lmserde_turboquant")
pytest.importorskip("lmserde_asym_k16_v8")

BAD_CHAINS = [
    (["fp8", "fp8"], "stage 2 ('fp8')", "bytes"),
    (["aesgcm", "fp8"], "stage 2 ('fp8')", "ciphertext"),
    (["fp8", "turboquant"], "stage 2 ('turboquant')", "bytes"),
    (["turboquant", "fp8"], "stage 2 ('fp8')", "bytes"),
    (["identity", "asym_k16_v8"], "stage 2 ('asym_k16_v8')", "bytes"),
    (["fp8", "aesgcm", "turboquant"], "stage 3 ('turboquant')", "ciphertext"),
]


def _stages(names: list[str], key: Path) -> list[dict[str, Any]]:
    return [{"type": n, "master_key_path": str(key)} if n == "aesgcm" else {"type": n}
            for n in names]


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "master.key"
    path.write_bytes(bytes(range(32)))
    path.chmod(0o600)
    return path


def test_shipped_specs_declare_what_they_consume_and_produce() -> None:
    for name in ("fp8", "turboquant", "asym_k16_v8", "asym_k16_v8_v_only"):
        spec = get_serde_spec(name)
        assert spec.consumes == frozenset({DataKind.KV_TENSORS}) and spec.consumes_hint
    assert get_serde_spec("aesgcm").consumes == frozenset({DataKind.KV_TENSORS, DataKind.BYTES})
    assert get_serde_spec("aesgcm").produces is DataKind.CIPHERTEXT
    assert get_serde_spec("identity").consumes == frozenset(DataKind)


@pytest.mark.parametrize("names, stage, got", BAD_CHAINS)
def test_bad_chains_fail_in_create_serde_chain(names: list[str], stage: str, got: str,
                                               key_file: Path) -> None:
    with pytest.raises(ValueError) as info:
        create_serde_chain(_stages(names, key_file))
    message = str(info.value)
    assert stage in message and f"receives {got}" in message and "kv_tensors" in message
    if got == "ciphertext":
        assert "before the encryption stage" in message


@pytest.mark.parametrize("names, stage, got", BAD_CHAINS)
def test_bad_chains_fail_in_create_l2_adapter(names: list[str], stage: str, got: str,
                                              key_file: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=stage.replace("(", "\\(").replace(")", "\\)")):
        create_l2_adapter({"type": "fs", "base_path": str(tmp_path / "kv"),
                           "serde": _stages(names, key_file)}, L1Manager(1 << 20))
    with pytest.raises(BenchInputError, match="cannot follow"):
        validate_serde_config(_stages(names, key_file))


@pytest.mark.parametrize(("names", "stage"), [
    (["aesgcm", "aesgcm"], "stage 2 ('aesgcm')"),
    (["fp8", "aesgcm", "aesgcm"], "stage 3 ('aesgcm')"),
    (["aesgcm"] * 10, "stage 2 ('aesgcm')"),
])
def test_encrypting_twice_is_refused_at_config_time(names: list[str], stage: str,
                                                    key_file: Path, tmp_path: Path) -> None:
    """Issue #27 case 8: aesgcm chained again (up to ten times) was accepted."""
    for build in (lambda: create_serde_chain(_stages(names, key_file)),
                  lambda: create_l2_adapter({"type": "fs", "base_path": str(tmp_path / "kv"),
                                             "serde": _stages(names, key_file)},
                                            L1Manager(1 << 20))):
        with pytest.raises(ValueError) as info:
            build()
        message = str(info.value)
        assert stage in message and "receives ciphertext" in message
        assert "use one encryption stage" in message
    assert not (tmp_path / "kv").exists()  # refused before the adapter was built


@pytest.mark.parametrize("names", [["fp8", "aesgcm"], ["turboquant", "aesgcm"],
                                   ["asym_k16_v8", "aesgcm"], ["identity", "aesgcm"],
                                   ["fp8", "identity", "aesgcm"]])
def test_good_chains_build(names: list[str], key_file: Path) -> None:
    chain = create_serde_chain(_stages(names, key_file))
    try:
        config = chain.get_config()
        assert [s["type"] for s in config["stages"]] == names
        assert chain.authenticates_output() is (names[-1] == "aesgcm")
    finally:
        chain.close()


def test_lmserde_info_shows_kinds_and_identity(capsys: pytest.CaptureFixture[str]) -> None:
    import argparse
    import json

    from lmserde.cli import info_command

    assert info_command.run(argparse.Namespace(type="aesgcm", json=True)) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["consumes"] == ["bytes", "kv_tensors"]
    assert data["produces"] == "ciphertext" and data["format_version"] == 1
    options = {o["name"]: o for o in data["options"]}
    assert options["master_key_path"]["identity"] is False
    assert options["frame_version"]["identity"] is False  # every frame records its version
    assert options["max_workers"]["identity"] is False
    assert options["max_workers"]["maximum"] == 256
