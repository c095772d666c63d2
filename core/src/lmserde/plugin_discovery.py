"""Entry-point discovery with failure isolation, shared by serdes, L2 adapters and hook plugins.

Metadata is scanned once, lazily; a plugin module is imported only when it is loaded. The same
entry point seen twice (duplicated install metadata) counts once; two different distributions
claiming one name is a conflict reported with both. ``LMSERDE_DISABLE_PLUGINS=a,b`` skips entry
points by name or by distribution name. A plugin whose distribution requires a different core
(``Requires-Dist: lmserde ...``, see :mod:`lmserde.compat`) is listed as ``incompatible`` and
refuses to load, without being imported.
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from lmserde.compat import incompatibility
from lmserde.containment import describe_exception, must_propagate

__all__ = ["PluginRecord", "PluginLoadError", "EntryPointGroup", "disabled_plugin_names"]

DISABLE_ENV = "LMSERDE_DISABLE_PLUGINS"


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def disabled_plugin_names() -> frozenset[str]:
    """Names (entry-point or distribution, normalized) listed in ``LMSERDE_DISABLE_PLUGINS``."""
    raw = os.environ.get(DISABLE_ENV, "")
    return frozenset(_normalize(p.strip()) for p in raw.split(",") if p.strip())


class PluginLoadError(ValueError):
    """A plugin could not be imported or built; names the plugin, distribution and version."""


@dataclass
class PluginRecord:
    """One discovered entry point and what happened when it was loaded."""

    group: str
    name: str
    value: str
    distribution: str
    version: str
    summary: str
    entry_point: EntryPoint | None = None
    disabled: bool = False
    conflict_with: list[str] = field(default_factory=list)
    loaded: Any = None
    error: BaseException | None = None
    #: Why this plugin's distribution cannot run on this core (``None``: compatible).
    incompatible: str | None = None

    @property
    def status(self) -> str:
        if self.disabled:
            return "disabled"
        if self.conflict_with:
            return "conflict"
        if self.incompatible:
            return "incompatible"
        if self.error is not None:
            return "failed"
        if self.loaded is not None:
            return "loaded"
        return "available"

    def describe_origin(self) -> str:
        return f"{self.distribution} {self.version}".strip()

    def load(self) -> Any:
        """Import the entry point's object once; failures raise :class:`PluginLoadError`.

        Whatever the import raises is contained (``SystemExit`` included; only a
        ``KeyboardInterrupt`` on the main thread propagates), recorded as the plugin's error and
        reported naming the plugin, its distribution and version.
        """
        if self.disabled:
            raise PluginLoadError(
                f"plugin '{self.name}' ({self.describe_origin()}) is disabled by {DISABLE_ENV}"
            )
        if self.conflict_with:
            others = ", ".join(self.conflict_with)
            raise PluginLoadError(
                f"plugin name '{self.name}' in group '{self.group}' is claimed by several "
                f"distributions: {self.distribution} and {others}; uninstall one of them"
            )
        if self.loaded is not None:
            return self.loaded
        if self.error is not None:
            raise self._wrap(self.error) from self.error
        assert self.entry_point is not None
        try:
            loaded = self.entry_point.load()
        except BaseException as exc:  # an import may raise SystemExit and worse
            if must_propagate(exc):
                raise
            self.error = exc
            raise self._wrap(exc) from exc
        self.loaded = loaded
        return self.loaded

    def _wrap(self, exc: BaseException) -> PluginLoadError:
        return PluginLoadError(
            f"plugin '{self.name}' from distribution {self.describe_origin()} failed to load "
            f"({self.value}): {describe_exception(exc)}"
        )


class EntryPointGroup:
    """The plugins of one entry-point group, scanned once on first use."""

    def __init__(self, group: str) -> None:
        self.group = group
        self._lock = threading.RLock()
        self._records: dict[str, PluginRecord] | None = None

    def records(self) -> dict[str, PluginRecord]:
        """Name -> record, in metadata order (scans on first call)."""
        with self._lock:
            if self._records is None:
                self._records = self._scan()
            return self._records

    def get(self, name: str) -> PluginRecord | None:
        return self.records().get(name)

    def rescan(self) -> None:
        """Forget the scan (tests install distributions at run time)."""
        with self._lock:
            self._records = None

    def _scan(self) -> dict[str, PluginRecord]:
        disabled = disabled_plugin_names()
        found: dict[str, PluginRecord] = {}
        seen: set[tuple[str, str, str]] = set()
        for ep in entry_points(group=self.group):
            dist = getattr(ep, "dist", None)
            dist_name = dist.metadata["Name"] if dist is not None else "<unknown>"
            version = dist.version if dist is not None else ""
            summary = (dist.metadata.get("Summary") or "") if dist is not None else ""
            identity = (ep.name, ep.value, _normalize(dist_name))
            if identity in seen:
                continue
            seen.add(identity)
            existing = found.get(ep.name)
            if existing is not None:
                if _normalize(existing.distribution) != _normalize(dist_name):
                    existing.conflict_with.append(f"{dist_name} {version}".strip())
                continue
            reason = incompatibility(dist)
            found[ep.name] = PluginRecord(
                group=self.group,
                name=ep.name,
                value=ep.value,
                distribution=dist_name,
                version=version,
                summary=summary,
                entry_point=ep,
                disabled=_normalize(ep.name) in disabled or _normalize(dist_name) in disabled,
                incompatible=reason,
                # load() raises this without importing anything
                error=PluginLoadError(reason) if reason else None,
            )
        return found
