"""Fixtures for the aesgcm plugin tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from aesgcm_objects import make_key, write_private
from lmserde import ObjectKey


@pytest.fixture
def master_key() -> bytes:
    return bytes(range(100, 132))


@pytest.fixture
def master_key_file(tmp_path: Path, master_key: bytes) -> Path:
    return write_private(tmp_path / "master.key", master_key)


@pytest.fixture
def key() -> ObjectKey:
    return make_key()
