"""The published spec: entry points, declared options, validation, what the config selects."""

from __future__ import annotations

import select
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import lmserde_aesgcm
import pytest
from aesgcm_objects import buffer, byte_obj, make_key, obj_bytes
from lmserde import SerdeSizeContract, create_serde_processor, get_serde_spec


def test_entry_points_declared() -> None:
    serde = {ep.name: ep.value for ep in entry_points(group="lmcache.serde")}
    hooks = {ep.name: ep.value for ep in entry_points(group="lmserde.hooks")}
    assert serde["aesgcm"] == "lmserde_aesgcm.spec:AESGCM_SPEC"
    assert hooks["aesgcm"] == "lmserde_aesgcm.cli"


def test_spec_contract() -> None:
    spec = get_serde_spec("aesgcm")
    assert spec is lmserde_aesgcm.AESGCM_SPEC
    assert spec.size_contract is SerdeSizeContract.EXACT and spec.lossy is False
    assert [o.name for o in spec.options or ()] == [
        "aes_bits", "key_provider", "master_key_path", "keyring_path",
        "keyring_reload_interval_s", "key_provider_options",
        "allow_insecure_key_permissions", "frame_version", "max_workers", "close_timeout_s",
    ]


def test_typo_in_option_is_caught(master_key_file: Path) -> None:
    with pytest.raises(ValueError, match="Did you mean 'master_key_path'"):
        create_serde_processor({"type": "aesgcm", "master_key_pth": str(master_key_file)})


@pytest.mark.parametrize("value", [4, 0, "two"])
def test_bad_frame_version(master_key_file: Path, value: Any) -> None:
    with pytest.raises(ValueError, match="frame_version"):
        create_serde_processor({"type": "aesgcm", "master_key_path": str(master_key_file),
                                "frame_version": value})


def test_hkdf_refuses_keyring_path(master_key_file: Path) -> None:
    with pytest.raises(ValueError, match="'keyring_path' is not used by key_provider 'hkdf'"):
        create_serde_processor({"type": "aesgcm", "master_key_path": str(master_key_file),
                                "keyring_path": "/x"})


def test_keyring_refuses_master_key_path(master_key_file: Path) -> None:
    with pytest.raises(ValueError, match="'master_key_path' is not used by key_provider 'keyr"):
        create_serde_processor({"type": "aesgcm", "key_provider": "keyring",
                                "keyring_path": "/x", "master_key_path": str(master_key_file)})


def test_empty_provider_name(master_key_file: Path) -> None:
    with pytest.raises(ValueError, match="key_provider must be a non-empty"):
        create_serde_processor({"type": "aesgcm", "key_provider": " "})


@pytest.mark.parametrize(("frame_version", "first_byte"), [(None, 3), (1, 1), (2, 2), (3, 3)])
def test_config_selects_frame_version(master_key_file: Path, frame_version: Any,
                                      first_byte: int) -> None:
    config: dict[str, Any] = {"type": "aesgcm", "master_key_path": str(master_key_file),
                              "max_workers": 2}
    if frame_version is not None:
        config["frame_version"] = frame_version
    proc = create_serde_processor(config)
    try:
        assert proc.max_workers == 2  # type: ignore[attr-defined]
        frame = buffer(10 + 50)
        task = proc.submit_serialize([byte_obj(b"0123456789")], [frame], [make_key()])
        poller = select.poll()
        poller.register(proc.get_serialize_event_fd(), select.POLLIN)
        assert poller.poll(30_000)
        assert proc.query_serialize_result(task) is True
        assert obj_bytes(frame)[0] == first_byte
        assert frame.get_size() == 10 + {1: 29, 2: 42, 3: 50}[first_byte]
    finally:
        proc.close()
