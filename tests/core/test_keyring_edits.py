"""Editing keyring files (forget a tenant, rotate, retire) and the keyring watch that lets running
processes pick the edits up without a restart."""

from __future__ import annotations

import base64
import json
import os
import stat
import time
from pathlib import Path

import pytest
from forked_child import ForkedChild
from hypothesis import given
from hypothesis import strategies as st
from lmserde.cli.main import main
from lmserde.tenant_keys import (
    WRAPPED_KEYRING_FORMAT_FIELD,
    Keyring,
    KeyringError,
    KeyringKeyProvider,
    KeyringWatch,
    RetiredKeyVersionError,
    UnknownKeyVersionError,
    UnknownTenantError,
    add_keyring_version,
    edit_keyring_file,
    forget_tenant,
    key_withdrawn,
    parse_keyring,
    read_keyring_file,
    retire_key_versions,
)

S1, S2, S3 = b"\x01" * 32, b"\x02" * 32, b"\x03" * 32


def _ring() -> Keyring:
    return (Keyring().with_new_version("alice", S1).with_new_version("alice", S2)
            .with_new_version("bob", S3))


def _write(path: Path, keyring: Keyring) -> Path:
    path.write_bytes(keyring.dumps())
    path.chmod(0o600)
    return path


def _wait_for(condition: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "not reached before the deadline"
        time.sleep(0.01)


def test_without_tenant_removes_every_version_and_keeps_the_others() -> None:
    ring = _ring().without_tenant("alice")
    assert set(ring.tenants) == {"bob"} and ring.secret("bob", 1) == S3
    with pytest.raises(UnknownTenantError) as refused:
        ring.secret("alice", 1)
    # the refusal a forgotten tenant's loads log must not suggest a new key brings them back
    assert "tenant forget" in str(refused.value) and "new stores only" in str(refused.value)
    with pytest.raises(UnknownTenantError):
        ring.without_tenant("alice")


def test_retired_versions_raise_retired_and_newer_ones_plain_unknown() -> None:
    ring = _ring().without_versions("alice", [1])
    assert ring.tenant("alice").current == 2 and set(ring.tenant("alice").secrets) == {2}
    with pytest.raises(RetiredKeyVersionError):
        ring.secret("alice", 1)
    with pytest.raises(UnknownKeyVersionError) as newer:
        ring.secret("alice", 3)  # not yet distributed here: not withdrawn
    assert not isinstance(newer.value, RetiredKeyVersionError)
    assert not key_withdrawn(newer.value)
    with pytest.raises(UnknownTenantError) as gone:
        ring.secret("carol", 1)
    assert key_withdrawn(gone.value)


_tenants = st.dictionaries(st.sampled_from(["", "alice", "bob", "carol", "t-1"]),
                           st.integers(min_value=1, max_value=4), min_size=1)


@given(_tenants, st.data())
def test_edits_touch_only_what_they_name(versions: dict[str, int], data: st.DataObject) -> None:
    """forget removes exactly one tenant and retire exactly the chosen non-current versions;
    everything else (secrets, current versions, the kind) survives a dump and parse."""
    ring = Keyring()
    for tenant, count in versions.items():
        for i in range(count):
            ring = ring.with_new_version(tenant, bytes([i + 1]) * 16 + tenant.encode())
    victim = data.draw(st.sampled_from(sorted(versions)))
    forgotten = parse_keyring(ring.without_tenant(victim).dumps())
    assert set(forgotten.tenants) == set(versions) - {victim}
    assert all(forgotten.tenants[t] == ring.tenants[t] for t in forgotten.tenants)
    keys = ring.tenant(victim)
    older = sorted(v for v in keys.secrets if v != keys.current)
    if older:
        chosen = data.draw(st.lists(st.sampled_from(older), min_size=1, unique=True))
        retired = parse_keyring(ring.without_versions(victim, chosen).dumps())
        assert set(retired.tenant(victim).secrets) == set(keys.secrets) - set(chosen)
        assert retired.tenant(victim).current == keys.current
        for version in chosen:
            with pytest.raises(RetiredKeyVersionError):
                retired.secret(victim, version)


def test_the_current_version_is_never_retired() -> None:
    with pytest.raises(KeyringError, match="rotate"):
        _ring().without_versions("alice", [2])
    with pytest.raises(UnknownKeyVersionError):
        _ring().without_versions("alice", [7])
    with pytest.raises(KeyringError, match="no key version selected"):
        _ring().without_versions("alice", [])


@pytest.mark.parametrize("misplaced", ["version", "current"])
def test_a_secret_in_the_wrong_place_is_not_quoted(misplaced: str, tmp_path: Path,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    """A hand-edited keyring with a secret where a version belongs (keys and values swapped, or
    the secret as 'current') is refused without printing the secret, also in the reload log."""
    secret = base64.b64encode(S1).decode()
    entry = ({"current": 1, "keys": {secret: "1"}} if misplaced == "version"
             else {"current": secret, "keys": {"1": secret}})
    doc = json.dumps({"lmserde_aesgcm_keyring": 1, "tenants": {"alice": entry}}).encode()
    with pytest.raises(KeyringError) as refused:
        parse_keyring(doc)
    assert secret not in str(refused.value) and "not shown" in str(refused.value)
    path = _write(tmp_path / "ring.json", _ring())
    watch = KeyringWatch(path, reload_interval_s=0)
    path.write_bytes(doc)
    with caplog.at_level("WARNING", logger="lmserde.tenant_keys"):
        assert watch.check_now() is False
    assert "could not be reloaded" in caplog.text and secret not in caplog.text
    assert secret not in str(watch.reload_error)
    with pytest.raises(KeyringError, match="'x1'"):  # a short value is still quoted
        parse_keyring(json.dumps({"lmserde_aesgcm_keyring": 1, "tenants": {
            "alice": {"current": 1, "keys": {"x1": secret}}}}).encode())


def test_forget_replaces_the_file_atomically_and_privately(tmp_path: Path) -> None:
    path = _write(tmp_path / "ring.json", _ring())
    before = os.stat(path).st_ino
    forget_tenant(path, "alice")
    st = os.stat(path)
    assert st.st_ino != before, "written beside and renamed, never edited in place"
    assert stat.S_IMODE(st.st_mode) == 0o600
    assert set(read_keyring_file(path).tenants) == {"bob"}
    assert b"alice" not in path.read_bytes()
    assert not [p for p in tmp_path.iterdir() if p.name != "ring.json"], "no staging file left"


def test_edits_at_the_same_time_both_take_effect(tmp_path: Path) -> None:
    """An edit that read the keyring before another edit's rename must not write back what it
    read: a rotation racing ``tenant forget`` would bring the forgotten tenant's keys back."""
    import threading

    path = _write(tmp_path / "ring.json", _ring())
    inside, release = threading.Event(), threading.Event()

    def slow_rotate(keyring: Keyring) -> Keyring:  # an edit that has read the file, not written
        inside.set()
        assert release.wait(30), "never released"
        return keyring.with_new_version("bob", S1)

    rotating = threading.Thread(target=edit_keyring_file, args=(path, slow_rotate))
    rotating.start()
    assert inside.wait(30)
    forgetting = threading.Thread(target=forget_tenant, args=(path, "alice"))
    forgetting.start()
    forgetting.join(timeout=1.0)  # without serialized edits, forget is done by now
    release.set()
    rotating.join(timeout=30)
    forgetting.join(timeout=30)
    assert not rotating.is_alive() and not forgetting.is_alive()
    ring = read_keyring_file(path)
    assert set(ring.tenants) == {"bob"}, "the forgotten tenant came back"
    assert set(ring.tenant("bob").secrets) == {1, 2}, "the rotation was lost"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert not [p for p in tmp_path.iterdir() if p.name != "ring.json"], "nothing left beside it"


def test_a_refused_edit_leaves_the_file_as_it_was(tmp_path: Path) -> None:
    path = _write(tmp_path / "ring.json", _ring())
    data = path.read_bytes()
    with pytest.raises(UnknownTenantError):
        forget_tenant(path, "carol")
    with pytest.raises(KeyringError):
        retire_key_versions(path, "alice", versions=(2,))
    assert path.read_bytes() == data


def test_retire_before(tmp_path: Path) -> None:
    path = _write(tmp_path / "ring.json", _ring())
    add_keyring_version(path, "alice")
    assert retire_key_versions(path, "alice", before=3) == (1, 2)
    assert set(read_keyring_file(path).tenant("alice").secrets) == {3}


def test_wrapped_keyrings_keep_their_kind_and_refuse_local_rotation(tmp_path: Path) -> None:
    wrapped = Keyring(format_field=WRAPPED_KEYRING_FORMAT_FIELD).with_new_version(
        "alice", b"w" * 40).with_new_version("alice", b"x" * 40).with_new_version("bob", b"y" * 40)
    path = _write(tmp_path / "wrapped.json", wrapped)
    retire_key_versions(path, "alice", versions=(1,))
    forget_tenant(path, "bob")
    doc = json.loads(path.read_bytes())
    assert doc[WRAPPED_KEYRING_FORMAT_FIELD] == 1 and set(doc["tenants"]) == {"alice"}
    with pytest.raises(KeyringError, match="kms rotate"):
        add_keyring_version(path, "alice")
    with pytest.raises(KeyringError, match="lmserde_aesgcm_keyring"):
        KeyringKeyProvider.from_file(path)  # a plain-keyring reader never takes wrapped bytes


def test_cli_rotate_retire_show_forget(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                       ) -> None:
    path = tmp_path / "ring.json"
    assert main(["keys", "rotate", str(path), "alice"]) == 0
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert main(["keys", "rotate", str(path), "alice", "--stage"]) == 0
    assert read_keyring_file(path).tenant("alice").current == 1
    assert main(["keys", "activate", str(path), "alice", "2"]) == 0
    assert read_keyring_file(path).tenant("alice").current == 2
    assert main(["keys", "activate", str(path), "alice", "9"]) == 1
    assert main(["keys", "rotate", str(path), "alice"]) == 0
    assert main(["keys", "rotate", str(path), "bob"]) == 0
    assert read_keyring_file(path).tenant("alice").current == 3
    assert main(["keys", "retire", str(path), "alice", "--before", "3"]) == 0
    assert set(read_keyring_file(path).tenant("alice").secrets) == {3}
    assert main(["keys", "retire", str(path), "alice", "3"]) == 1  # the current one: refused
    assert main(["keys", "retire", str(path), "alice"]) == 2
    capsys.readouterr()
    assert main(["keys", "show", str(path)]) == 0
    shown = capsys.readouterr().out
    assert "'alice': current 3, versions 3" in shown and "'bob': current 1" in shown
    secret = read_keyring_file(path).secret("alice", 3)
    assert base64.b64encode(secret).decode() not in shown
    assert main(["tenant", "forget", str(path), "alice"]) == 0
    assert set(read_keyring_file(path).tenants) == {"bob"}
    assert main(["tenant", "forget", str(path), "alice"]) == 1  # a typo never "succeeds"
    assert "no key for tenant 'alice'" in capsys.readouterr().err


def test_watch_picks_up_an_edit_without_a_restart(tmp_path: Path) -> None:
    path = _write(tmp_path / "ring.json", _ring())
    provider = KeyringKeyProvider.from_file(path, reload_interval_s=0.05)
    assert provider.root_secret("alice", 1) == S1 and provider.key_generation() == 0
    forget_tenant(path, "alice")

    def forgotten() -> bool:
        try:
            provider.root_secret("alice", 1)
        except UnknownTenantError:
            return True
        return False

    _wait_for(forgotten)
    assert provider.key_generation() == 1
    assert provider.root_secret("bob", 1) == S3


def test_watch_keeps_the_last_good_keyring_when_the_file_breaks(tmp_path: Path) -> None:
    path = _write(tmp_path / "ring.json", _ring())
    watch = KeyringWatch(path, reload_interval_s=0)  # checked by hand below
    path.write_bytes(b'{"lmserde_aesgcm_keyring": 1, "tenants": {"alice": ')  # half written
    assert watch.check_now() is False
    assert watch.reload_error is not None and "not UTF-8 JSON" in watch.reload_error
    assert watch.current().secret("alice", 2) == S2 and watch.generation == 0
    path.chmod(0o644)
    _write(path, _ring().without_tenant("bob"))
    path.chmod(0o644)  # group-readable: refused, the last good keyring stays
    assert watch.check_now() is False and "accessible by group" in str(watch.reload_error)
    provider = KeyringKeyProvider(watch)
    assert "reload failing" in provider.describe()
    path.chmod(0o600)
    assert watch.check_now() is True
    assert "reload failing" not in provider.describe()
    assert watch.reload_error is None and watch.generation == 1
    assert set(watch.current().tenants) == {"alice"}
    assert watch.check_now() is False  # unchanged file: not read again


def test_two_checks_at_once_never_install_the_older_keyring(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A check that read the file (before ``forget``) and is slow to install what it read must
    not overwrite the forgotten keyring a later check installed: the file would then look
    unchanged, and the forgotten tenant's keys stay in use."""
    import threading

    path = _write(tmp_path / "ring.json", _ring())
    watch = KeyringWatch(path, reload_interval_s=0)
    _write(path, _ring().with_new_version("bob", S2))  # a change the slow check reads
    read, release = threading.Event(), threading.Event()
    real_read = watch._read

    def slow_read() -> Keyring:
        keyring = real_read()
        if not read.is_set():  # the first check: read, then held before it installs
            read.set()
            assert release.wait(30)
        return keyring

    monkeypatch.setattr(watch, "_read", slow_read)
    slow = threading.Thread(target=watch.check_now)
    slow.start()
    assert read.wait(30)
    forget_tenant(path, "alice")
    later = threading.Thread(target=watch.check_now)
    later.start()
    later.join(timeout=1.0)  # without one check at a time, the later one is done by now
    release.set()
    slow.join(timeout=30)
    later.join(timeout=30)
    watch.check_now()
    assert set(watch.current().tenants) == {"bob"}, "the forgotten tenant's keys came back"


def test_watch_interval_zero_never_reloads(tmp_path: Path) -> None:
    path = _write(tmp_path / "ring.json", _ring())
    provider = KeyringKeyProvider.from_file(path, reload_interval_s=0)
    forget_tenant(path, "alice")
    time.sleep(0.2)
    assert provider.root_secret("alice", 1) == S1 and provider.key_generation() == 0


def test_a_due_check_does_not_run_on_the_callers_thread(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The data path only reads the keyring it has: the file is looked at on another thread."""
    import threading

    from lmserde.tenant_keys import keyring_watch

    path = _write(tmp_path / "ring.json", _ring())
    watch = KeyringWatch(path, reload_interval_s=0.01)
    caller = threading.get_ident()
    seen: list[int] = []
    real_stamp = keyring_watch._stamp

    def spying_stamp(p: str) -> tuple[int, int, int, int, int]:
        seen.append(threading.get_ident())
        return real_stamp(p)

    monkeypatch.setattr(keyring_watch, "_stamp", spying_stamp)
    time.sleep(0.02)
    watch.current()
    _wait_for(lambda: bool(seen))
    assert caller not in seen


def test_a_forked_child_checks_the_file_itself(tmp_path: Path) -> None:
    """A check in flight in the parent at fork time has no thread in the child: the child's next
    due check must not wait for it."""
    path = _write(tmp_path / "ring.json", _ring())
    provider = KeyringKeyProvider.from_file(path, reload_interval_s=0.02)
    watch = provider.watch
    assert watch is not None
    with watch._lock:  # as if the parent's check thread were running when it forked
        watch._checking = True
    forget_tenant(path, "alice")
    child = ForkedChild(_forgotten_in_child, provider)
    assert child.answer(timeout=30) is True
    assert child.exitcode == 0


def test_a_child_forked_while_a_check_holds_the_lock_still_reloads(tmp_path: Path) -> None:
    """A fork while the parent's check thread holds the watch's lock (it compares keyrings under
    it) must not leave the child's data path waiting for a lock no thread there will release."""
    path = _write(tmp_path / "ring.json", _ring())
    provider = KeyringKeyProvider.from_file(path, reload_interval_s=0.02)
    watch = provider.watch
    assert watch is not None
    forget_tenant(path, "alice")
    with watch._lock:  # held by "the check thread" at the moment of the fork
        child = ForkedChild(_forgotten_in_child, provider)
    assert child.answer(timeout=20) is True
    assert child.exitcode == 0


def _forgotten_in_child(provider: KeyringKeyProvider, result: object) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            provider.root_secret("alice", 1)
        except UnknownTenantError:
            result.put(True)  # type: ignore[attr-defined]
            return
        time.sleep(0.01)
    result.put(False)  # type: ignore[attr-defined]
