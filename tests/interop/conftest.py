"""Fixtures for the LMCache interop tests.

The modules that need the real ``lmcache`` package skip themselves when it is not importable (the
``interop`` nox session installs ``lmcache==0.5.6``); nothing here imports it at collection time.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def master_key_file(tmp_path: Path) -> Path:
    """A 32-byte master key file readable by its owner only (both aesgcm readers accept it)."""
    path = tmp_path / "master.key"
    path.write_bytes(os.urandom(32))
    path.chmod(0o600)
    return path


@pytest.fixture
def lmcache_l1() -> Iterator[Any]:
    """LMCache's own ``L1Manager`` (64 MiB of plain CPU memory, no shared-memory segment)."""
    from lmcache_objects import make_l1_manager

    manager = make_l1_manager(64 << 20)
    yield manager
    manager.close()
