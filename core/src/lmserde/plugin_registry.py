"""One registry of specs for any entry-point group: programmatic names plus lazy plugins.

:class:`SpecRegistry` serves the serde registry (``lmcache.serde``), the L2 adapter registry
(``lmcache.l2_adapter``) and any later group the same way: entry-point metadata is scanned once,
on first use (:class:`~lmserde.plugin_discovery.EntryPointGroup`, which also applies
``LMSERDE_DISABLE_PLUGINS``, detects two distributions claiming one name and refuses a plugin
built for another core); a plugin module is imported only when its name is looked up; whatever a
plugin raises while importing or building is reported naming the plugin, its distribution and
version, and never affects another name. A name that is not installed gets an install hint
(:mod:`lmserde.install_hints`) when a distribution of this repository provides it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from lmserde.builtin_plugins import BUILTIN_FACTS, CORE_DISTRIBUTION_NAME, BuiltinFacts
from lmserde.containment import describe_exception, must_propagate
from lmserde.install_hints import KNOWN_PROVIDERS, install_hint
from lmserde.plugin_discovery import DISABLE_ENV, EntryPointGroup, PluginLoadError, PluginRecord
from lmserde.suggestions import closest_match

__all__ = ["SpecRegistry", "RegistryEntry", "PluginInfo", "spec_from_entry_object"]

S = TypeVar("S")
T = TypeVar("T")


def spec_from_entry_object(spec_type: type[T], obj: Any, what: str) -> T:
    """``obj`` if it is a ``spec_type``; a plain factory callable wrapped in one (its docstring's
    first line as description, ``options=None``: it receives the config untouched); else
    ``TypeError`` (``what`` names the entry point, e.g. ``"a serde"``)."""
    if isinstance(obj, spec_type):
        return obj
    if callable(obj):
        return spec_type(factory=obj,  # type: ignore[call-arg]
                         description=(obj.__doc__ or "").strip().split("\n")[0], options=None)
    raise TypeError(f"{what} entry point must name an lmserde.{spec_type.__name__} or a factory "
                    f"callable, got {type(obj).__name__}")


@dataclass(frozen=True)
class PluginInfo:
    """One name as listed for users: origin, status, description and the error if any."""

    name: str
    distribution: str
    version: str
    status: str
    description: str
    error: str | None = None


@dataclass(frozen=True)
class RegistryEntry(PluginInfo, Generic[S]):
    """A :class:`PluginInfo` with the spec when loaded and, for core's own entry points, what
    core knows about them without importing (``builtin``)."""

    spec: S | None = None
    builtin: BuiltinFacts | None = None


class SpecRegistry(Generic[S]):
    """The specs of one entry-point group.

    ``kind`` names what a spec describes in messages (``"serde"``, ``"L2 adapter"``);
    ``coerce(obj)`` turns what an entry point names into a spec (``TypeError`` when it cannot:
    the plugin is reported as invalid); ``describe(spec)`` is the spec's one-line description.
    Thread-safe; lookups of different names do not block each other while a plugin imports.
    """

    def __init__(self, group: str, kind: str, coerce: Callable[[Any], S],
                 describe: Callable[[S], str]) -> None:
        self.group_name = group
        self.kind = kind
        self._coerce = coerce
        self._describe = describe
        self._lock = threading.RLock()
        self._group = EntryPointGroup(group)
        self._programmatic: dict[str, S] = {}

    # -- registration ---------------------------------------------------------------------------

    def register(self, name: str, spec: S) -> None:
        """Add ``spec`` under ``name``; a name already known (and not disabled) is a ``ValueError``."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"{self.kind} type name must be a non-empty str, got {name!r}")
        with self._lock:
            record = self._group.get(name)
            if name in self._programmatic or (record is not None and not record.disabled):
                raise ValueError(f"{self._title} type already registered: '{name}'")
            self._programmatic[name] = spec

    def unregister(self, name: str) -> None:
        """Remove a programmatically registered name (plugins cannot be unregistered)."""
        with self._lock:
            if name not in self._programmatic:
                raise ValueError(
                    f"{self._title} type '{name}' was not registered programmatically")
            del self._programmatic[name]

    def rescan(self) -> None:
        """Forget the entry-point scan; the next lookup reads installed metadata again."""
        with self._lock:
            self._group.rescan()

    # -- lookup ---------------------------------------------------------------------------------

    def names(self) -> list[str]:
        """Every known name: discovered plugins (metadata order), then programmatic ones."""
        with self._lock:
            names = [n for n, r in self._group.records().items() if not r.disabled]
            names += [n for n in self._programmatic if n not in names]
            return names

    def get(self, name: str) -> S:
        """The spec of ``name``, importing its plugin if needed.

        Unknown names raise ``ValueError`` (:meth:`unknown_error`); a plugin that cannot be
        imported or names something that is not a spec raises :class:`PluginLoadError` (a
        ``ValueError``).
        """
        with self._lock:
            if name in self._programmatic:
                return self._programmatic[name]
            record = self._group.get(name)
        if record is None or record.disabled:
            raise self.unknown_error(name)
        obj = record.load()
        try:
            return self._coerce(obj)
        except TypeError as exc:
            record.error = exc
            raise PluginLoadError(
                f"{self.kind} plugin '{name}' from distribution {record.describe_origin()} is "
                f"invalid: {exc}"
            ) from exc

    def unknown_error(self, name: str) -> ValueError:
        """``Unknown <kind> type 'x'. Registered: a, b`` plus why it is missing, when known:
        disabled, the install hint of a plugin of this repository, or else the closest name
        (registered; installed but disabled, said so; or provided by this repository, with
        its install hint)."""
        names = self.names()
        listing = ", ".join(sorted(names)) or "(none)"
        message = f"Unknown {self.kind} type '{name}'. Registered: {listing}"
        record = self._group.get(name)
        if record is not None and record.disabled:
            return ValueError(message + f" ('{name}' is installed but disabled by {DISABLE_ENV})")
        hint = install_hint(self.group_name, name)
        if hint:
            return ValueError(message + f". {hint}")
        with self._lock:
            installed = list(self._group.records())  # disabled ones too: say so below
        candidates = {*names, *installed, *KNOWN_PROVIDERS.get(self.group_name, {})}
        close = closest_match(name, sorted(candidates))
        if close is not None:
            message += f". Did you mean '{close}'?"
            close_record = self._group.get(close)
            if close_record is not None and close_record.disabled:
                message += f" ('{close}' is installed but disabled by {DISABLE_ENV})"
            elif close not in names:
                message += f" {install_hint(self.group_name, close)}"
        return ValueError(message)

    def origin(self, name: str) -> str:
        """``"from distribution NAME VERSION"``, ``"registered programmatically"`` or
        ``"of unknown origin"``."""
        with self._lock:
            if name in self._programmatic:
                return "registered programmatically"
            record = self._group.get(name)
        if record is None:
            return "of unknown origin"
        return f"from distribution {record.describe_origin()}"

    def build(self, name: str, call: Callable[[], T], *, keep_exceptions: bool = False) -> T:
        """Run plugin code that builds something for ``name``, containing what it raises.

        Anything raised (``SystemExit`` and every other ``BaseException``; only a main-thread
        ``KeyboardInterrupt`` propagates) becomes a :class:`PluginLoadError` naming the plugin
        and its origin, exception chained. With ``keep_exceptions`` an ``Exception`` keeps its
        type (the plugin's own error report) and only the rest is converted.
        """
        try:
            return call()
        except BaseException as exc:  # plugin code: SystemExit etc. are contained too
            if must_propagate(exc) or (keep_exceptions and isinstance(exc, Exception)):
                raise
            raise PluginLoadError(
                f"{self.kind} '{name}' ({self.origin(name)}) failed to build: "
                f"{describe_exception(exc)}"
            ) from exc

    # -- listing --------------------------------------------------------------------------------

    def entries(self, *, load: bool = False) -> list[RegistryEntry[S]]:
        """Every known name with its origin and status; with ``load`` each plugin is imported.

        Never raises for a broken plugin: its failure is reported in the entry. Without ``load``
        core's own entries carry their :class:`~lmserde.builtin_plugins.BuiltinFacts`.
        """
        with self._lock:
            records = list(self._group.records().values())
            programmatic = dict(self._programmatic)
        entries = [self._entry(record, load) for record in records]
        entries += [RegistryEntry(name, "(programmatic)", "", "registered", self._describe(spec),
                                  spec=spec) for name, spec in programmatic.items()]
        return entries

    def _entry(self, record: PluginRecord, load: bool) -> RegistryEntry[S]:
        builtin = None
        if record.distribution == CORE_DISTRIBUTION_NAME:
            builtin = BUILTIN_FACTS.get(self.group_name, {}).get(record.name)
        description = builtin.description if builtin is not None else record.summary
        spec: S | None = None
        error = None
        if record.conflict_with:
            error = "also claimed by " + ", ".join(record.conflict_with)
        elif load and not record.disabled:
            try:
                spec = self.get(record.name)
                description = self._describe(spec) or description
            except Exception as exc:  # listing never breaks
                cause = exc.__cause__ or exc
                error = f"{type(cause).__name__}: {cause}"
        elif record.error is not None:
            error = f"{type(record.error).__name__}: {record.error}"
        return RegistryEntry(record.name, record.distribution, record.version, record.status,
                             description, error, spec, builtin)

    @property
    def _title(self) -> str:
        return self.kind[:1].upper() + self.kind[1:]
