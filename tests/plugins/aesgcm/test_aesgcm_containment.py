"""Issue #13, cases 1 and 7 for aesgcm: a key provider raising ``asyncio.CancelledError`` fails
the store (never a hit with another object's data), and a FIFO key path is refused at once."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from aesgcm_objects import kv_object, make_key, obj_bytes
from lmserde import MemoryLayoutDesc, PluginLoadError, TensorMemoryObj, create_serde_processor
from lmserde.hooks import get_plugin_manager
from lmserde.l1 import L1Manager
from lmserde.l2 import create_l2_adapter, load_sync, store_sync
from lmserde_aesgcm import KeyFileError, read_master_key_file

FLAKY_KMS = '''
import asyncio
from lmserde import hookimpl
from lmserde_aesgcm import KeyProvider

CALLS = []


class FlakyKms(KeyProvider):
    """A KMS client whose second current_version call is cancelled (as under asyncio)."""

    def current_version(self, tenant):
        CALLS.append(tenant)
        if len(CALLS) == 2:
            raise asyncio.CancelledError("KMS request cancelled")
        return 1

    def root_secret(self, tenant, version):
        return bytes(range(32))

    def describe(self):
        return "flaky test KMS"


@hookimpl
def lmserde_aesgcm_key_provider(name, options):
    return FlakyKms() if name == "flaky-kms" else None


@hookimpl
def lmserde_aesgcm_key_provider_names():
    return ["flaky-kms"]
'''

EXITING_PROVIDER = '''
from lmserde import hookimpl

@hookimpl
def lmserde_aesgcm_key_provider(name, options):
    raise SystemExit("provider plugin exited")
'''

SHAPE = [2, 4, 16, 64]


@pytest.fixture
def flaky_kms(plugin_site: Callable[..., Path]) -> Any:
    plugin_site("lmserde-testplugin-flakykms", "0.2",
                entry_points={"lmserde.hooks": {"flaky-kms": "lmserde_testplugin_flakykms"}},
                modules={"lmserde_testplugin_flakykms": FLAKY_KMS})
    get_plugin_manager()
    return sys.modules["lmserde_testplugin_flakykms"]


def test_cancelled_key_provider_fails_the_store_and_the_load_misses(flaky_kms: Any) -> None:
    l1 = L1Manager(64 << 20)
    adapter = create_l2_adapter(
        {"type": "memory",
         "serde": {"type": "aesgcm", "key_provider": "flaky-kms", "frame_version": 1}}, l1)
    try:
        key_a, key_b = make_key(chunk=b"a" * 32, salt="t"), make_key(chunk=b"b" * 32, salt="t")
        obj_a, obj_b = (kv_object(SHAPE, torch.bfloat16, seed=s) for s in (1, 2))
        assert store_sync(adapter, [key_a], [obj_a]).is_successful()
        # the provider's second call raises CancelledError: the store must fail
        assert not store_sync(adapter, [key_b], [obj_b]).is_successful()
        assert len(flaky_kms.CALLS) == 2
        out = TensorMemoryObj.allocate(MemoryLayoutDesc([SHAPE], [torch.bfloat16]), zero=True)
        bitmap = load_sync(adapter, [key_b], [out])
        assert not bitmap.test(0), "key B must miss, never load another object's data"
        assert obj_bytes(out) != obj_bytes(obj_a)
        # the serde still works afterwards: B stores and loads
        assert store_sync(adapter, [key_b], [obj_b]).is_successful()
        assert load_sync(adapter, [key_b], [out]).test(0)
        assert obj_bytes(out) == obj_bytes(obj_b)
    finally:
        adapter.close()


def test_provider_plugin_raising_system_exit_is_reported(plugin_site: Callable[..., Path],
                                                         flaky_kms: Any) -> None:
    plugin_site("lmserde-testplugin-exitkms", "0.1",
                entry_points={"lmserde.hooks": {"exit-kms": "lmserde_testplugin_exitkms"}},
                modules={"lmserde_testplugin_exitkms": EXITING_PROVIDER})
    get_plugin_manager()
    # the exiting plugin is asked first (registered last) and does not stop the others
    proc = create_serde_processor({"type": "aesgcm", "key_provider": "flaky-kms"})
    proc.close()
    with pytest.raises(PluginLoadError, match="exit-kms.*SystemExit|SystemExit"):
        create_serde_processor({"type": "aesgcm", "key_provider": "vault"})


def test_fifo_master_key_path_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "master.key"
    os.mkfifo(fifo, 0o600)
    outcome: list[BaseException | None] = []

    def build() -> None:
        try:
            create_l2_adapter({"type": "memory", "serde": {"type": "aesgcm",
                                                           "master_key_path": str(fifo)}},
                              L1Manager(1 << 20))
            outcome.append(None)
        except BaseException as exc:  # reported below
            outcome.append(exc)

    worker = threading.Thread(target=build, daemon=True)
    worker.start()
    worker.join(30)
    if worker.is_alive():  # unblock the open() so the thread can end, then fail
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        pytest.fail("create_l2_adapter blocked on a FIFO master_key_path")
    (error,) = outcome
    assert isinstance(error, ValueError) and "not a regular file (a FIFO)" in str(error)
    with pytest.raises(KeyFileError, match="a FIFO"):
        read_master_key_file(fifo)


def test_directory_key_path_is_refused(tmp_path: Path) -> None:
    with pytest.raises(KeyFileError, match="not a regular file \\(a directory\\)"):
        read_master_key_file(tmp_path)


def test_key_locations_and_write_choices_are_not_identity_options(
        tmp_path: Path, master_key_file: Path) -> None:
    """Every aesgcm frame records its version and key size and is read whatever the options say
    now, so only what a reader must agree on is identity: nothing but the format version, for
    every frame version (the identity never names the key: objects stored by earlier releases
    keep their config)."""
    other = tmp_path / "other.key"
    other.write_bytes(master_key_file.read_bytes())
    other.chmod(0o600)
    stranger = tmp_path / "stranger.key"
    stranger.write_bytes(os.urandom(32))
    stranger.chmod(0o600)
    configs = {}
    for path, version, workers in ((master_key_file, 3, 1), (other, 3, 4), (other, 2, 1),
                                   (master_key_file, 1, 1), (stranger, 1, 2)):
        proc = create_serde_processor({"type": "aesgcm", "master_key_path": str(path),
                                       "frame_version": version, "max_workers": workers})
        configs[(path, version, workers)] = (proc.get_config(), proc.authenticates_output())
        proc.close()
    v3a, v3b, v2, v1a, v1b = configs.values()
    assert v3a == v3b
    assert v3a[0] == v2[0] == v1a[0] == v1b[0] == {"type": "aesgcm", "format_version": 1,
                                                   "options": {}}
    assert v3a[1] is True and v2[1] is True and v1a[1] is False  # v1 does not authenticate
