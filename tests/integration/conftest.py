"""Fixtures of the data-path tests: the session's toy serdes, an L1 manager, a driver."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from datapath_driver import Cache
from lmserde.l1 import L1Manager
from lmserde.registry import get_registered_serde_types, register_serde_factory, unregister_serde_factory
from toy_serdes import TEST_SERDES, spec_for


@pytest.fixture(scope="session", autouse=True)
def test_serdes() -> Iterator[None]:
    """Register the ``t_*`` serdes for the whole session."""
    added = []
    for name in TEST_SERDES:
        if name not in get_registered_serde_types():
            register_serde_factory(name, spec_for(name))
            added.append(name)
    yield
    for name in added:
        unregister_serde_factory(name)


@pytest.fixture
def l1() -> L1Manager:
    return L1Manager(1 << 30)


@pytest.fixture
def cache(l1: L1Manager) -> Cache:
    return Cache(l1)


