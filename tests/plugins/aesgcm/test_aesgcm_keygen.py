"""``lmserde keygen``: new master keys (0600, never overwriting) and keyring versions."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest
from lmserde.cli.main import main as lmserde_main
from lmserde_aesgcm import KeyFileError, KeyringKeyProvider, read_master_key_file, write_master_key


def test_writes_32_random_bytes_mode_0600(tmp_path: Path) -> None:
    a, b = write_master_key(tmp_path / "a"), write_master_key(tmp_path / "b")
    assert len(a.read_bytes()) == 32 and a.read_bytes() != b.read_bytes()
    assert a.stat().st_mode & 0o777 == 0o600
    assert read_master_key_file(a) == a.read_bytes()


def test_a_new_key_never_ends_with_a_newline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            caplog: pytest.LogCaptureFixture) -> None:
    """1 random key in 256 ends with 0x0A, which reading it would warn about (an editor's
    newline?): keygen draws again instead."""
    from lmserde.tenant_keys import key_files

    draws = iter([b"k" * 31 + b"\n", b"k" * 31 + b"\n", b"k" * 32])
    monkeypatch.setattr(key_files.secrets, "token_bytes", lambda n: next(draws))
    path = write_master_key(tmp_path / "k")
    assert path.read_bytes() == b"k" * 32
    with caplog.at_level("WARNING"):
        read_master_key_file(path)
    assert "newline" not in caplog.text


def test_mode_is_0600_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o277)
    try:
        path = write_master_key(tmp_path / "k")
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o600


def test_refuses_to_overwrite(tmp_path: Path) -> None:
    path = tmp_path / "k"
    path.write_bytes(b"existing key material!")
    with pytest.raises(KeyFileError, match="refusing to overwrite"):
        write_master_key(path)
    assert path.read_bytes() == b"existing key material!"


def test_refuses_a_dangling_symlink(tmp_path: Path) -> None:
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(KeyFileError, match="refusing to overwrite"):
        write_master_key(link)
    assert not (tmp_path / "elsewhere").exists()


def test_missing_directory_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(KeyFileError, match="cannot create master key file"):
        write_master_key(tmp_path / "no" / "such" / "dir" / "k")


def test_cli_keygen_through_core_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "master"
    assert lmserde_main(["keygen", str(path)]) == 0
    key = path.read_bytes()
    assert len(key) == 32 and path.stat().st_mode & 0o777 == 0o600
    out = capsys.readouterr()
    assert key.hex() not in out.out + out.err
    assert lmserde_main(["keygen", str(path)]) == 1
    assert "refusing to overwrite" in capsys.readouterr().err
    assert path.read_bytes() == key


def test_cli_keyring_add_stage_activate(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    ring = tmp_path / "ring.json"
    assert lmserde_main(["keygen", "--keyring", str(ring), "--tenant", "alice"]) == 0
    assert lmserde_main(["keygen", "--keyring", str(ring), "--tenant", "alice", "--stage"]) == 0
    assert KeyringKeyProvider.from_file(ring).current_version("alice") == 1
    assert lmserde_main(["keygen", "--keyring", str(ring), "--tenant", "alice",
                         "--activate", "2"]) == 0
    provider = KeyringKeyProvider.from_file(ring)
    assert provider.current_version("alice") == 2
    out = capsys.readouterr().out
    for version in (1, 2):
        secret = provider.root_secret("alice", version)
        assert base64.b64encode(secret).decode() not in out and secret.hex() not in out
    assert ring.stat().st_mode & 0o777 == 0o600


def test_cli_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert lmserde_main(["keygen", "--keyring", str(tmp_path / "r")]) == 2
    assert "--tenant" in capsys.readouterr().err
    assert lmserde_main(["keygen", str(tmp_path / "k"), "--tenant", "a"]) == 2
    assert not (tmp_path / "k").exists()
    assert lmserde_main(["keygen", "--keyring", str(tmp_path / "r"), "--tenant", "a",
                         "--activate", "3"]) == 1
    assert "cannot open keyring file" in capsys.readouterr().err
