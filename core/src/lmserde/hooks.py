"""pluggy extension points: observability events, CLI subcommands, plugin-defined hookspecs.

Hook plugins are discovered from the entry-point group ``lmserde.hooks`` with the same failure
isolation as serdes: a plugin that fails to import is recorded (and listed by
``lmserde plugins``), never raised into the host. Hook implementations are called one by one
(:func:`call_hookimpls`): one that raises anything is logged naming its plugin and ignored, and
the others still run. Plugins may add their own hookspecs with
``get_plugin_manager().add_hookspecs(...)`` (the aesgcm plugin adds a key-provider hook).

Hook plugins are loaded once per process, off the data path: by the first
:func:`get_plugin_manager` / :func:`load_hook_plugins` call, which every
:class:`~lmserde.AsyncSerdeProcessor` and serde wrapper makes when it is constructed. Emitting an
event (:func:`emit_serde_task_event`, :func:`emit_wrapper_task_event`, called on worker and poll
threads) never scans entry points or imports anything, and never waits for an observer: the
event is queued and delivered, in order, on one daemon thread to the plugins loaded by then
(:mod:`lmserde.event_delivery`; :func:`flush_events` waits for it, :func:`event_delivery_stats`
counts what was delivered and what was dropped because the observers fell behind).
A hook plugin's entry point should name a module that imports only what its hooks need.
"""

from __future__ import annotations

import argparse
import logging
import threading
from dataclasses import dataclass
from typing import Any

import pluggy

from lmserde.containment import describe_exception, must_propagate
from lmserde.event_delivery import EventDelivery
from lmserde.observability import PolicyChangeEvent, SerdeTaskEvent, WrapperTaskEvent
from lmserde.plugin_discovery import EntryPointGroup, PluginLoadError, PluginRecord

__all__ = [
    "PROJECT_NAME",
    "HOOKS_GROUP",
    "hookspec",
    "hookimpl",
    "CoreHookSpecs",
    "get_plugin_manager",
    "load_hook_plugins",
    "hook_plugin_records",
    "emit_serde_task_event",
    "emit_wrapper_task_event",
    "emit_policy_change_event",
    "flush_events",
    "event_delivery_stats",
    "reset_plugin_manager",
    "call_hookimpls",
    "HookImplResult",
]

PROJECT_NAME = "lmserde"
HOOKS_GROUP = "lmserde.hooks"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)

_log = logging.getLogger(__name__)


class CoreHookSpecs:
    """Hooks the core calls."""

    @hookspec
    def lmserde_serde_task_finished(self, event: SerdeTaskEvent) -> None:
        """A processor task finished (successfully or not)."""

    @hookspec
    def lmserde_wrapper_task_finished(self, event: WrapperTaskEvent) -> None:
        """A serde-wrapped L2 store or load task finished."""

    @hookspec
    def lmserde_policy_changed(self, event: PolicyChangeEvent) -> None:
        """The ``auto`` policy changed the candidate it stores new objects with."""

    @hookspec
    def lmserde_add_cli_commands(self, subparsers: argparse._SubParsersAction) -> None:
        """Add subcommands to the ``lmserde`` CLI.

        Each added parser must ``set_defaults(handler=fn)`` where ``fn(args) -> int`` returns the
        exit code.
        """


_hook_group = EntryPointGroup(HOOKS_GROUP)
_pm: pluggy.PluginManager | None = None
_pm_lock = threading.Lock()


def get_plugin_manager() -> pluggy.PluginManager:
    """The process-wide plugin manager, with hook plugins from ``lmserde.hooks`` registered.

    The first call scans the entry-point group and imports every enabled hook plugin (each
    failure is recorded and logged, never raised); later calls return the same manager without
    scanning again. Thread-safe.
    """
    global _pm
    with _pm_lock:
        if _pm is None:
            pm = pluggy.PluginManager(PROJECT_NAME)
            pm.add_hookspecs(CoreHookSpecs)
            for record in _hook_group.records().values():
                _register_hook_plugin(pm, record)
            _pm = pm
        return _pm


def load_hook_plugins() -> None:
    """Load the hook plugins now (once per process), so that later events never trigger it.

    Called by :class:`~lmserde.AsyncSerdeProcessor` and the serde wrapper when they are built.
    Cheap after the first call. Never raises for a plugin's sake: a plugin that fails is recorded.
    """
    if _pm is None:
        get_plugin_manager()


def _register_hook_plugin(pm: pluggy.PluginManager, record: PluginRecord) -> None:
    if record.disabled:
        return
    try:
        plugin = record.load()
        pm.register(plugin, name=f"{record.distribution}:{record.name}")
    except PluginLoadError as exc:
        _log.warning("%s", exc)
    except BaseException as exc:  # registering runs plugin code too
        if must_propagate(exc):
            raise
        record.error = exc
        _log.warning("hook plugin '%s' (%s) failed to register: %s", record.name,
                     record.describe_origin(), describe_exception(exc))


def hook_plugin_records() -> list[PluginRecord]:
    """Discovered hook plugins (loads them, to report failures)."""
    get_plugin_manager()
    return list(_hook_group.records().values())


def reset_plugin_manager() -> None:
    """Drop the plugin manager and rescan hook plugins on next use (for tests)."""
    global _pm
    with _pm_lock:
        _pm = None
        _hook_group.rescan()


@dataclass(frozen=True)
class HookImplResult:
    """What one hook implementation did: its ``value``, or the ``error`` it raised."""

    plugin_name: str
    value: Any = None
    error: BaseException | None = None


def call_hookimpls(
    hook_name: str, /, *, firstresult: bool = False, **kwargs: Any
) -> list[HookImplResult]:
    """Call every implementation of ``hook_name`` separately, each one contained.

    Implementations run in pluggy's order (the last registered first), each with the arguments
    it names from ``kwargs``. One that raises anything (``SystemExit`` and every other
    ``BaseException``; only a ``KeyboardInterrupt`` on the main thread propagates) is logged
    naming its plugin and recorded in its result; the other implementations still run (pluggy
    itself stops at the first one that raises). With ``firstresult`` the calls stop at
    the first implementation that returns something other than ``None``. Hook wrappers are not
    called. An unknown hook name gives ``[]``.
    """
    return _call_impls(get_plugin_manager(), hook_name, firstresult, kwargs)


def _call_impls(
    pm: pluggy.PluginManager, hook_name: str, firstresult: bool, kwargs: dict[str, Any]
) -> list[HookImplResult]:
    hook = getattr(pm.hook, hook_name, None)
    if hook is None:
        return []
    results: list[HookImplResult] = []
    for impl in reversed(hook.get_hookimpls()):
        if impl.hookwrapper or getattr(impl, "wrapper", False):
            continue
        try:
            value = impl.function(*[kwargs[name] for name in impl.argnames])
        except BaseException as exc:  # plugin code
            if must_propagate(exc):
                raise
            _log.error("hook %s of plugin %r raised %s; ignored", hook_name, impl.plugin_name,
                       describe_exception(exc), exc_info=exc)
            results.append(HookImplResult(impl.plugin_name, error=exc))
            continue
        results.append(HookImplResult(impl.plugin_name, value=value))
        if firstresult and value is not None:
            break
    return results


def _deliver(pm: pluggy.PluginManager, hook_name: str, kwargs: dict[str, Any]) -> None:
    try:
        _call_impls(pm, hook_name, False, kwargs)
    except Exception:  # the plugin manager itself failed; never break the delivery thread
        _log.exception("hook %s could not be called; ignored", hook_name)


#: Delivers the events emitted on the data path, off it (see :mod:`lmserde.event_delivery`).
_events = EventDelivery(_deliver)


def _emit(hook_name: str, **kwargs: Any) -> None:
    """Queue an event for the hook plugins already loaded; never loads any, never raises, never
    waits (a full queue drops the event, counted in :func:`event_delivery_stats`)."""
    pm = _pm  # one read of the reference: no lock, no discovery on the data path
    if pm is None:  # nothing loaded yet (only after reset_plugin_manager), so no one to tell
        return
    hook = getattr(pm.hook, hook_name, None)
    if hook is None or not hook.get_hookimpls():
        return  # nobody listens: nothing to queue
    _events.submit(pm, hook_name, kwargs)


def flush_events(timeout: float = 10.0) -> bool:
    """Wait (at most ``timeout`` seconds) until every event emitted so far reached the hook
    plugins; whether it did. Events are delivered off the data path, on one thread, in order:
    a test (or a shutdown that wants its last events out) waits here, the data path never does."""
    return _events.flush(timeout)


def event_delivery_stats() -> dict[str, int]:
    """How many events were ``delivered`` to the hook plugins, ``dropped`` because they fell
    behind (the queue holds :data:`~lmserde.event_delivery.DEFAULT_EVENT_QUEUE_LIMIT`), and are
    ``queued`` now."""
    return _events.stats()


def emit_serde_task_event(event: SerdeTaskEvent) -> None:
    """Deliver a processor event to every loaded hook implementation; never raises.

    Each implementation is called on its own (:func:`call_hookimpls`): one that raises (any
    ``BaseException`` but a main-thread ``KeyboardInterrupt``) is logged and the others still
    run. Queued on the processor's worker thread, delivered on the event thread (never waits,
    never loads hook plugins).
    """
    _emit("lmserde_serde_task_finished", event=event)


def emit_wrapper_task_event(event: WrapperTaskEvent) -> None:
    """Deliver a wrapper event like :func:`emit_serde_task_event` (never loads, never raises)."""
    _emit("lmserde_wrapper_task_finished", event=event)


def emit_policy_change_event(event: PolicyChangeEvent) -> None:
    """Deliver a policy change like :func:`emit_serde_task_event` (never loads, never raises)."""
    _emit("lmserde_policy_changed", event=event)
