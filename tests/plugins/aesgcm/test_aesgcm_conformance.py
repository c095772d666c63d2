"""The lmserde conformance kit, for every configuration family of the aesgcm serde."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, ClassVar

import pytest
from aesgcm_objects import write_private
from lmserde.testing import SerdeConformance
from lmserde_aesgcm import add_keyring_version


class _AesGcmKit(SerdeConformance):
    serde_type = "aesgcm"
    deterministic = False  # a fresh random IV per frame, by design
    detects_corruption = True
    extra_kwargs: ClassVar[dict[str, Any]] = {}

    @pytest.fixture(autouse=True)
    def _key_material(self, tmp_path: Path) -> None:
        key = write_private(tmp_path / "master", os.urandom(32))
        self.serde_kwargs = {"master_key_path": str(key), **self.extra_kwargs}


class TestAesGcmFrameV2Conformance(_AesGcmKit):
    pass


class TestAesGcmFrameV1Conformance(_AesGcmKit):
    extra_kwargs: ClassVar[dict[str, Any]] = {"frame_version": 1}


class TestAesGcm256Conformance(_AesGcmKit):
    extra_kwargs: ClassVar[dict[str, Any]] = {"aes_bits": 256}


class TestAesGcmKeyringConformance(_AesGcmKit):
    @pytest.fixture(autouse=True)
    def _key_material(self, tmp_path: Path) -> None:
        ring = tmp_path / "ring.json"
        add_keyring_version(ring, "tenant-a")  # the kit's keys use cache_salt "tenant-a"
        add_keyring_version(ring, "tenant-a")
        self.serde_kwargs = {"key_provider": "keyring", "keyring_path": str(ring)}
