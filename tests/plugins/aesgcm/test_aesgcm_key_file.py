"""Master key files: read raw like LMCache, but refuse short or exposed keys; never leak them."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from aesgcm_objects import buffer, byte_obj, make_key, write_private
from lmserde import ForeignObjectError, create_serde_processor
from lmserde_aesgcm import (
    AesGcmDeserializer,
    AesGcmSerializer,
    HkdfKeyProvider,
    KeyFileError,
    derive_key,
    read_master_key_file,
)

SECRET = b"\x8f\x01SECRET-MATERIAL-42\x00\xfe" + b"Q" * 11


def _leaks(text: str) -> bool:
    """Whether ``text`` shows SECRET in any common rendering."""
    renderings = [SECRET.hex(), repr(SECRET), SECRET.decode("latin-1"), "SECRET-MATERIAL-42",
                  SECRET.hex().upper()]
    return any(r in text for r in renderings)


def test_read_raw_bytes_exactly(tmp_path: Path) -> None:
    path = write_private(tmp_path / "k", SECRET)
    assert read_master_key_file(path) == SECRET


def test_short_key_refused_with_advice(tmp_path: Path) -> None:
    path = write_private(tmp_path / "k", b"x" * 15)
    with pytest.raises(KeyFileError, match=r"holds 15 bytes; at least 16.*lmserde keygen"):
        read_master_key_file(path)


def test_empty_key_refused(tmp_path: Path) -> None:
    with pytest.raises(KeyFileError, match="holds 0 bytes"):
        read_master_key_file(write_private(tmp_path / "k", b""))


def test_sixteen_bytes_accepted(tmp_path: Path) -> None:
    assert len(read_master_key_file(write_private(tmp_path / "k", b"y" * 16))) == 16


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644, 0o660, 0o602])
def test_group_or_other_access_refused_with_fix(tmp_path: Path, mode: int) -> None:
    path = write_private(tmp_path / "k", SECRET, mode)
    with pytest.raises(KeyFileError, match=r"chmod 600") as info:
        read_master_key_file(path)
    message = str(info.value)
    assert f"{mode:04o}" in message and "allow_insecure_key_permissions" in message
    assert not _leaks(message)


@pytest.mark.parametrize("mode", [0o600, 0o400, 0o700])
def test_owner_only_modes_accepted(tmp_path: Path, mode: int) -> None:
    path = write_private(tmp_path / "k", SECRET, mode)
    assert read_master_key_file(path) == SECRET


def test_insecure_permissions_allowed_explicitly(tmp_path: Path,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    path = write_private(tmp_path / "k", SECRET, 0o644)
    with caplog.at_level(logging.WARNING, logger="lmserde_aesgcm"):
        assert read_master_key_file(path, allow_insecure_permissions=True) == SECRET
    assert "accessible by group or others" in caplog.text
    assert not _leaks(caplog.text)


def test_insecure_permissions_allowed_through_config(tmp_path: Path) -> None:
    path = write_private(tmp_path / "k", SECRET, 0o644)
    with pytest.raises(ValueError, match="chmod 600"):
        create_serde_processor({"type": "aesgcm", "master_key_path": str(path)})
    proc = create_serde_processor({"type": "aesgcm", "master_key_path": str(path),
                                   "allow_insecure_key_permissions": True})
    proc.close()


def test_symlink_judged_by_target(tmp_path: Path) -> None:
    target = write_private(tmp_path / "real", SECRET, 0o600)
    link = tmp_path / "link"
    link.symlink_to(target)
    assert read_master_key_file(link) == SECRET
    os.chmod(target, 0o644)
    with pytest.raises(KeyFileError, match="chmod 600"):
        read_master_key_file(link)


def test_trailing_newline_kept_and_warned(tmp_path: Path,
                                          caplog: pytest.LogCaptureFixture) -> None:
    path = write_private(tmp_path / "k", SECRET + b"\n")
    with caplog.at_level(logging.WARNING, logger="lmserde_aesgcm"):
        key = read_master_key_file(path)
    assert key == SECRET + b"\n", "the newline must stay part of the key (LMCache reads it raw)"
    assert "ends with a newline" in caplog.text
    assert not _leaks(caplog.text)


def test_no_warning_without_trailing_newline(tmp_path: Path,
                                             caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="lmserde_aesgcm"):
        read_master_key_file(write_private(tmp_path / "k", SECRET))
    assert "newline" not in caplog.text


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(KeyFileError, match="cannot open master key file"):
        read_master_key_file(tmp_path / "absent")
    (tmp_path / "dir").mkdir(mode=0o700)
    with pytest.raises(KeyFileError, match="not a regular file|cannot"):
        read_master_key_file(tmp_path / "dir")


def test_oversized_file_refused(tmp_path: Path) -> None:
    path = write_private(tmp_path / "big", b"z" * ((1 << 20) + 1))
    with pytest.raises(KeyFileError, match="larger than"):
        read_master_key_file(path)


def test_key_material_absent_from_reprs_and_errors(tmp_path: Path) -> None:
    path = write_private(tmp_path / "k", SECRET)
    provider = HkdfKeyProvider.from_file(path)
    ser = AesGcmSerializer(provider)
    de = AesGcmDeserializer(provider)
    derived = derive_key(SECRET, "alice", 16)
    texts = [repr(provider), str(provider), repr(ser), repr(de)]
    frame = buffer(10 + 50)
    ser.serialize(byte_obj(b"0123456789"), frame, make_key())
    try:
        AesGcmDeserializer(HkdfKeyProvider(b"k" * 32)).deserialize(frame, buffer(10), make_key())
    except ForeignObjectError as exc:  # another master key: KeyMismatchError
        texts.append(str(exc))
    else:
        pytest.fail("wrong key accepted")
    proc = create_serde_processor({"type": "aesgcm", "master_key_path": str(path)})
    texts.append(repr(proc))
    proc.close()
    for text in texts:
        assert not _leaks(text), text
        assert derived.hex() not in text


def test_provider_rejects_short_in_memory_key() -> None:
    with pytest.raises(KeyFileError, match="at least 16"):
        HkdfKeyProvider(b"short")
