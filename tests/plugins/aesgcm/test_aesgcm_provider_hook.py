"""Third-party key providers through the ``lmserde_aesgcm_key_provider`` hook, end to end."""

from __future__ import annotations

import logging
import select
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aesgcm_objects import buffer, byte_obj, make_key, obj_bytes
from lmserde import create_serde_processor, get_plugin_manager, hookimpl
from lmserde_aesgcm import (
    AesGcmDeserializer,
    KeyProviderError,
    Keyring,
    KeyringKeyProvider,
    TenantKeys,
    UnattributedAuthenticationError,
    provider_names,
)

PLUGIN_SOURCE = (Path(__file__).parent / "lmserde_testplugin_kms.py").read_text()
SECRET_HEX = "a1" * 24


@pytest.fixture
def kms_plugin(plugin_site: Callable[..., Path]) -> Any:
    """Install the test-kms plugin as its own distribution; return its module once loaded."""
    plugin_site("lmserde-testplugin-kms", "1.0",
                entry_points={"lmserde.hooks": {"test-kms": "lmserde_testplugin_kms"}},
                modules={"lmserde_testplugin_kms": PLUGIN_SOURCE})
    get_plugin_manager()  # the core loads hook plugins from the entry-point group
    return sys.modules["lmserde_testplugin_kms"]


def _config(**extra: Any) -> dict[str, Any]:
    return {"type": "aesgcm", "key_provider": "test-kms",
            "key_provider_options": {"tenants": {"alice": SECRET_HEX}, "version": 5}, **extra}


def _wait(fd: int) -> None:
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    assert poller.poll(30_000), "task did not finish"


def test_provider_from_plugin_round_trips_through_processor(kms_plugin: Any) -> None:
    proc = create_serde_processor(_config(max_workers=2))
    try:
        key = make_key(salt="alice")
        data = bytes(range(256)) * 4
        frame = buffer(len(data) + 50)
        task = proc.submit_serialize([byte_obj(data)], [frame], [key])
        _wait(proc.get_serialize_event_fd())
        assert proc.query_serialize_result(task) is True
        assert obj_bytes(frame)[2:6] == (5).to_bytes(4, "big"), "header names the KMS version"
        out = buffer(len(data))
        task = proc.submit_deserialize([frame], [out], [key])
        _wait(proc.get_deserialize_event_fd())
        assert proc.query_deserialize_result(task) is True
        assert obj_bytes(out) == data
    finally:
        proc.close()
    # The KMS was asked once for (alice, 5): the serde caches the derived key.
    assert kms_plugin.FETCHES.count(("alice", 5)) == 1
    # The same secret in a keyring decrypts the frame: the root-secret contract is the same.
    ring = KeyringKeyProvider(Keyring({"alice": TenantKeys(5, {5: bytes.fromhex(SECRET_HEX)})}))
    out = buffer(len(data))
    AesGcmDeserializer(ring).deserialize(frame, out, key)
    assert obj_bytes(out) == data


def test_plugin_name_is_listed(kms_plugin: Any) -> None:
    names = provider_names()  # the built-ins, then every plugin's (lmserde-kms: aws-kms), sorted
    assert names[:2] == ["hkdf", "keyring"] and "test-kms" in names
    assert names[2:] == sorted(names[2:])


def test_unknown_provider_lists_available(kms_plugin: Any) -> None:
    with pytest.raises(ValueError, match=r"unknown key_provider 'vault'\. Available: hkdf, "
                                         r"keyring, (\S+, )*test-kms"):
        create_serde_processor({"type": "aesgcm", "key_provider": "vault"})


def test_unknown_provider_without_plugins() -> None:
    with pytest.raises(ValueError, match="unknown key_provider 'vault'.*lmserde.hooks") as info:
        create_serde_processor({"type": "aesgcm", "key_provider": "vault"})
    assert isinstance(info.value.__cause__, KeyProviderError)


def test_plugin_option_errors_name_the_provider(kms_plugin: Any) -> None:
    bad = {"type": "aesgcm", "key_provider": "test-kms",
           "key_provider_options": {"tenants": {"alice": SECRET_HEX}, "colour": "red"}}
    with pytest.raises(ValueError, match="key provider 'test-kms': unknown test-kms opt"):
        create_serde_processor(bad)


def test_options_of_other_providers_refused(kms_plugin: Any, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="'master_key_path' is not used by key_provider 'test-km"):
        create_serde_processor(_config(master_key_path=str(tmp_path / "k")))
    with pytest.raises(ValueError, match="'key_provider_options' is not used by key_provider 'h"):
        create_serde_processor({"type": "aesgcm", "master_key_path": "x",
                                "key_provider_options": {"a": 1}})


def test_key_provider_options_must_be_a_mapping() -> None:
    with pytest.raises(ValueError, match="key_provider_options must be a mapping"):
        create_serde_processor({"type": "aesgcm", "key_provider": "test-kms",
                                "key_provider_options": ["tenants"]})


class _ReturnsWrongType:
    @hookimpl
    def lmserde_aesgcm_key_provider(self, name: str, options: Any) -> Any:
        return object() if name == "broken" else None


class _ClaimsHkdf:
    @hookimpl
    def lmserde_aesgcm_key_provider(self, name: str, options: Any) -> Any:
        raise AssertionError("built-in providers must not be looked up through the hook")


class _BadSignature:
    @hookimpl
    def lmserde_aesgcm_key_provider(self, name: str, secret_flag: bool) -> Any:
        raise AssertionError("must never be called")


def test_hook_returning_a_non_provider_is_refused() -> None:
    pm = get_plugin_manager()
    plugin = _ReturnsWrongType()
    pm.register(plugin)
    try:
        with pytest.raises(ValueError, match="not a lmserde_aesgcm.KeyProvider"):
            create_serde_processor({"type": "aesgcm", "key_provider": "broken"})
    finally:
        pm.unregister(plugin)


def test_builtin_names_cannot_be_overridden(master_key_file: Path) -> None:
    pm = get_plugin_manager()
    plugin = _ClaimsHkdf()
    pm.register(plugin)
    try:
        create_serde_processor({"type": "aesgcm", "master_key_path": str(master_key_file)}).close()
    finally:
        pm.unregister(plugin)


def test_plugin_with_wrong_hook_signature_is_dropped_with_warning(
    plugin_site: Callable[..., Path], caplog: pytest.LogCaptureFixture
) -> None:
    source = (
        "from lmserde import hookimpl\n\n"
        "@hookimpl\n"
        "def lmserde_aesgcm_key_provider(name, secret_flag):\n"
        "    raise AssertionError('never called')\n"
    )
    plugin_site("lmserde-testplugin-badsig", "1.0",
                entry_points={"lmserde.hooks": {"badsig": "lmserde_testplugin_badsig"}},
                modules={"lmserde_testplugin_badsig": source})
    get_plugin_manager()  # registers the plugin before the aesgcm hookspec exists
    with caplog.at_level(logging.WARNING, logger="lmserde_aesgcm"), \
            pytest.raises(ValueError, match="unknown key_provider 'x'"):
        create_serde_processor({"type": "aesgcm", "key_provider": "x"})
    assert "secret_flag" in caplog.text


def test_v1_frame_of_another_kms_secret_is_unattributed_under_every_provider(
        kms_plugin: Any) -> None:
    """A version-1 frame names no key: one that fails authentication is someone else's (kept),
    whichever provider reads it; the config identity names no key either (stable across
    releases: the stored-object frame's payload checksum is what proves damage)."""
    proc = create_serde_processor(_config(frame_version=1))
    try:
        assert proc.get_config()["options"] == {}
        key = make_key(salt="alice")
        frame = buffer(10 + 29)
        task = proc.submit_serialize([byte_obj(b"0123456789")], [frame], [key])
        _wait(proc.get_serialize_event_fd())
        assert proc.query_serialize_result(task) is True
    finally:
        proc.close()
    # the same KMS plugin, holding another secret for alice (another fleet's KMS)
    opaque = create_serde_processor({"type": "aesgcm", "key_provider": "test-kms",
                                     "key_provider_options": {"tenants": {"alice": "b2" * 24},
                                                              "version": 5}})
    try:
        deserializer = opaque.serde_pair().deserializer  # type: ignore[attr-defined]
        with pytest.raises(UnattributedAuthenticationError):
            deserializer.deserialize(frame, buffer(10), key)
    finally:
        opaque.close()
    other = KeyringKeyProvider(Keyring({"alice": TenantKeys(5, {5: b"\x99" * 24})}))
    with pytest.raises(UnattributedAuthenticationError) as info:  # a keyring: the same verdict
        AesGcmDeserializer(other).deserialize(frame, buffer(10), key)
    assert not isinstance(info.value, ValueError)
