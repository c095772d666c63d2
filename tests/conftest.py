"""Fixtures shared by every test package."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import settings
from lmserde.hooks import get_plugin_manager, hookimpl, reset_plugin_manager
from lmserde.observability import PolicyChangeEvent
from lmserde.registries import L2_ADAPTERS
from lmserde.registry import rescan_serde_plugins

# Property tests check behaviour, not speed: no per-example deadline (a loaded CI machine would
# otherwise turn slowness into failures).
settings.register_profile("lmserde", deadline=None)
settings.load_profile("lmserde")


def write_distribution(
    site: Path,
    name: str,
    version: str,
    *,
    entry_points: dict[str, dict[str, str]],
    modules: dict[str, str],
    summary: str = "",
    requires: tuple[str, ...] = (),
) -> None:
    """Install a distribution into ``site`` the way an installer lays it out.

    Writes each module's source and a ``<name>-<version>.dist-info`` directory with METADATA,
    entry_points.txt and RECORD, so ``importlib.metadata`` discovers it once ``site`` is on
    ``sys.path``.
    """
    site.mkdir(parents=True, exist_ok=True)
    for module, source in modules.items():
        path = site / (module.replace(".", "/") + ".py")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    dist_info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    dist_info.mkdir(exist_ok=True)
    (dist_info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nSummary: {summary}\n"
        + "".join(f"Requires-Dist: {req}\n" for req in requires)
    )
    lines: list[str] = []
    for group, eps in entry_points.items():
        lines.append(f"[{group}]")
        lines += [f"{k} = {v}" for k, v in eps.items()]
        lines.append("")
    (dist_info / "entry_points.txt").write_text("\n".join(lines))
    (dist_info / "RECORD").write_text("")
    (dist_info / "INSTALLER").write_text("lmserde-tests\n")


@pytest.fixture
def plugin_site(tmp_path: Path) -> Iterator[Callable[..., Path]]:
    """Install test distributions into a temporary site directory on ``sys.path``.

    Yields ``install(name, version, entry_points=..., modules=..., site=None)``. Afterwards the
    path, imported test modules and plugin scans are cleaned up.
    """
    added: list[str] = []
    modules_before = set(sys.modules)

    def install(name: str, version: str = "1.0", *, site: Path | None = None,
                **kwargs: object) -> Path:
        target = site or tmp_path / "site"
        write_distribution(target, name, version, **kwargs)  # type: ignore[arg-type]
        if str(target) not in sys.path:
            sys.path.insert(0, str(target))
            added.append(str(target))
        importlib.invalidate_caches()
        rescan_serde_plugins()
        L2_ADAPTERS.rescan()
        reset_plugin_manager()
        return target

    yield install
    for p in added:
        while p in sys.path:
            sys.path.remove(p)
    for m in set(sys.modules) - modules_before:
        if m.startswith("lmserde_testplugin"):
            del sys.modules[m]
    rescan_serde_plugins()
    L2_ADAPTERS.rescan()
    reset_plugin_manager()


class _PolicyListener:
    """A hook plugin that keeps every ``lmserde_policy_changed`` event."""

    def __init__(self) -> None:
        self.events: list[PolicyChangeEvent] = []

    @hookimpl
    def lmserde_policy_changed(self, event: PolicyChangeEvent) -> None:
        self.events.append(event)


@pytest.fixture
def policy_events() -> Iterator[list[PolicyChangeEvent]]:
    """The ``auto`` policy's change events delivered while the test runs (call
    ``lmserde.hooks.flush_events()`` before reading: delivery is off the caller's thread)."""
    listener = _PolicyListener()
    get_plugin_manager().register(listener, name="test-policy-events")
    try:
        yield listener.events
    finally:
        get_plugin_manager().unregister(name="test-policy-events")
