"""Prometheus export of serde-wrapped L2 adapters' metrics (needs the ``prometheus`` extra).

``pip install 'lmserde[prometheus]'`` installs ``prometheus_client``; then::

    from prometheus_client import start_http_server
    from lmserde.l2.serde.prometheus_export import register_wrapper

    register_wrapper(adapter, name="kv-fs")   # adapter: a SerdeL2AdapterWrapper
    start_http_server(9400)

Each scrape reads every registered wrapper's live snapshot (``wrapper.metrics()`` and
``wrapper.report_status()``): nothing is counted twice and nothing can drift. Wrappers are held by
weak references; a wrapper that is closed or garbage-collected disappears from the next scrape.
A wrapper whose snapshot raises is left out of that scrape (logged), never failing the scrape.

Every sample carries the labels ``adapter`` (the registered name) and ``serde`` (the wrapper's
``serde_type``). Metrics (counters end in ``_total``):

========================================  =====================================================
``lmserde_wrapper_store_tasks_total``     store tasks by ``result`` (``ok``, ``failed``)
``lmserde_wrapper_store_keys_total``      keys submitted to store
``lmserde_wrapper_load_tasks_total``      load tasks
``lmserde_wrapper_load_keys_total``       keys submitted to load
``lmserde_wrapper_load_hits_total``       keys loaded
``lmserde_wrapper_load_misses_total``     keys not loaded (``load_keys - load_hits``)
``lmserde_wrapper_load_hits_read_also_total`` keys loaded with a ``read_also`` config, by
                                          ``read_config`` (part of ``load_hits``)
``lmserde_wrapper_store_bytes_total``     bytes stored, by ``form`` (``kv`` in, ``serialized`` out)
``lmserde_wrapper_load_bytes_total``      bytes loaded, by ``form`` (``serialized`` in, ``kv`` out)
``lmserde_wrapper_failures_total``        failures by ``stage`` (store tasks, load keys)
``lmserde_wrapper_rejections_total``      stored objects rejected as a miss, by ``reason``
``lmserde_wrapper_repaired_total``        stored objects repaired
``lmserde_wrapper_stage_seconds``         summary (count, sum) of stage latencies, by ``stage``
``lmserde_wrapper_healthy``               1 when ``report_status()["is_healthy"]``, else 0
``lmserde_wrapper_auto_choices_total``    ``auto``: store tasks per ``candidate`` (explorations
                                          included)
``lmserde_wrapper_auto_switches_total``   ``auto``: changes of the current candidate
``lmserde_wrapper_auto_current``          ``auto``: 1 for the ``candidate`` new objects are
                                          stored with, 0 for the others
``lmserde_wrapper_auto_bandwidth_bytes``  ``auto``: the adapter's measured throughput (stored
                                          bytes per second), by ``direction`` (``store``,
                                          ``load``; absent until measured)
========================================  =====================================================

``load_hits_read_also`` has a series per ``read_also`` config the wrapper lists (0 included).
``rejections``, ``repaired`` and ``healthy`` appear only for wrappers whose snapshot or status
has them; once present, every reason of :data:`REJECTION_REASONS` is exported (0 included) so
rates are defined before the first rejection.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Iterator
from typing import Any

from lmserde.l2.serde.stored_frame import REJECT_REASONS

__all__ = ["REJECTION_REASONS", "WrapperCollector", "register_wrapper", "unregister_wrapper",
           "PROMETHEUS_INSTALL_HINT"]

_log = logging.getLogger(__name__)

#: The rejection reasons a fail-closed wrapper reports (always exported once rejections are): the
#: stored-object frame's refusal reasons, one list for both.
REJECTION_REASONS = REJECT_REASONS

PROMETHEUS_INSTALL_HINT = (
    "the Prometheus export needs prometheus_client: pip install 'lmserde[prometheus]'"
)

_LABELS = ["adapter", "serde"]


def _client() -> Any:
    """The ``prometheus_client`` module, or an ImportError that says how to install it."""
    try:
        import prometheus_client
        import prometheus_client.core
    except ImportError as exc:
        raise ImportError(PROMETHEUS_INSTALL_HINT) from exc
    return prometheus_client


class _Entry:
    __slots__ = ("labels", "ref")

    def __init__(self, ref: weakref.ref[Any], labels: tuple[str, str]) -> None:
        self.ref = ref
        self.labels = labels


def _is_closed(wrapper: Any) -> bool:
    """Whether ``wrapper`` says it is closed (its public ``closed`` property; an object
    without one counts as open)."""
    return bool(getattr(wrapper, "closed", False))


class WrapperCollector:
    """A ``prometheus_client`` collector of serde wrappers (see the module docstring).

    Register it with a ``CollectorRegistry`` yourself, or use :func:`register_wrapper`, which
    keeps one collector per registry. Thread-safe.
    """

    def __init__(self) -> None:
        _client()
        self._lock = threading.Lock()
        self._entries: dict[int, _Entry] = {}

    def add(self, wrapper: Any, name: str | None = None) -> None:
        """Export ``wrapper`` under ``adapter=name`` (default: its inner adapter's type).

        Raises ``ValueError`` if a live wrapper with the same ``adapter`` and ``serde`` labels is
        already exported (their series would collide; pass distinct names), and ``TypeError``
        for an object without ``metrics()`` and ``report_status()``.
        """
        if not callable(getattr(wrapper, "metrics", None)) or not callable(
                getattr(wrapper, "report_status", None)):
            raise TypeError(f"expected a serde-wrapped L2 adapter (metrics(), report_status()), "
                            f"got {type(wrapper).__name__}")
        if name is None:
            inner = getattr(wrapper, "inner_adapter", None)
            name = str(getattr(inner, "adapter_type", "") or type(inner).__name__)
        labels = (str(name), str(getattr(wrapper, "serde_type", type(wrapper).__name__)))
        ident = id(wrapper)
        with self._lock:
            self._prune_locked()
            current = self._entries.get(ident)
            if current is not None and current.ref() is wrapper:
                if current.labels == labels:
                    return
                raise ValueError(f"wrapper already exported as adapter={current.labels[0]!r}")
            for entry in self._entries.values():
                if entry.labels == labels:
                    raise ValueError(
                        f"a wrapper with adapter={labels[0]!r}, serde={labels[1]!r} is already "
                        f"exported; pass a distinct name="
                    )
            self._entries[ident] = _Entry(weakref.ref(wrapper, self._forget(ident)), labels)

    def _forget(self, ident: int) -> Any:
        def callback(ref: weakref.ref[Any]) -> None:
            with self._lock:
                entry = self._entries.get(ident)
                if entry is not None and entry.ref is ref:
                    del self._entries[ident]
        return callback

    def remove(self, wrapper: Any) -> bool:
        """Stop exporting ``wrapper``; ``False`` if it was not exported."""
        with self._lock:
            entry = self._entries.get(id(wrapper))
            if entry is None or entry.ref() is not wrapper:
                return False
            del self._entries[id(wrapper)]
            return True

    def _prune_locked(self) -> None:
        for ident in [i for i, e in self._entries.items()
                      if (w := e.ref()) is None or _is_closed(w)]:
            del self._entries[ident]

    def exported(self) -> list[tuple[str, str]]:
        """``(adapter, serde)`` labels of the wrappers the next scrape will export."""
        with self._lock:
            self._prune_locked()
            return sorted(e.labels for e in self._entries.values())

    def _snapshots(self) -> list[tuple[list[str], dict[str, Any], dict[str, Any]]]:
        with self._lock:
            self._prune_locked()
            live = [(e.labels, w) for e in self._entries.values() if (w := e.ref()) is not None]
        out = []
        for labels, wrapper in sorted(live, key=lambda item: item[0]):
            try:
                snapshot = dict(wrapper.metrics())
                status = dict(wrapper.report_status())
            except Exception:
                _log.exception("Prometheus export: reading wrapper %s/%s failed; left out of "
                               "this scrape", *labels)
                continue
            out.append((list(labels), snapshot, status))
        return out

    def describe(self) -> list[Any]:
        """Nothing: the metric set depends on the wrappers alive at scrape time."""
        return []

    def collect(self) -> Iterator[Any]:
        """The metric families of every live wrapper, read from its snapshot now."""
        core = _client().core
        counter = core.CounterMetricFamily
        fams = {
            "store_tasks": counter("lmserde_wrapper_store_tasks", "Store tasks by result",
                                   labels=[*_LABELS, "result"]),
            "store_keys": counter("lmserde_wrapper_store_keys", "Keys submitted to store",
                                  labels=_LABELS),
            "load_tasks": counter("lmserde_wrapper_load_tasks", "Load tasks", labels=_LABELS),
            "load_keys": counter("lmserde_wrapper_load_keys", "Keys submitted to load",
                                 labels=_LABELS),
            "load_hits": counter("lmserde_wrapper_load_hits", "Keys loaded", labels=_LABELS),
            "load_misses": counter("lmserde_wrapper_load_misses", "Keys not loaded",
                                   labels=_LABELS),
            "load_hits_read_also": counter("lmserde_wrapper_load_hits_read_also",
                                           "Keys loaded with a read_also serde config",
                                           labels=[*_LABELS, "read_config"]),
            "store_bytes": counter("lmserde_wrapper_store_bytes",
                                   "Bytes stored: kv in, serialized out", labels=[*_LABELS, "form"]),
            "load_bytes": counter("lmserde_wrapper_load_bytes",
                                  "Bytes loaded: serialized in, kv out", labels=[*_LABELS, "form"]),
            "failures": counter("lmserde_wrapper_failures",
                                "Failures by stage (store tasks, load keys)",
                                labels=[*_LABELS, "stage"]),
            "rejections": counter("lmserde_wrapper_rejections",
                                  "Stored objects rejected as a miss, by reason",
                                  labels=[*_LABELS, "reason"]),
            "repaired": counter("lmserde_wrapper_repaired", "Stored objects repaired",
                                labels=_LABELS),
            "stage_seconds": core.SummaryMetricFamily(
                "lmserde_wrapper_stage_seconds", "Stage latencies in seconds",
                labels=[*_LABELS, "stage"]),
            "healthy": core.GaugeMetricFamily("lmserde_wrapper_healthy",
                                              "1 when the wrapped adapter reports itself healthy",
                                              labels=_LABELS),
            "auto_choices": counter("lmserde_wrapper_auto_choices",
                                    "auto: store tasks per candidate",
                                    labels=[*_LABELS, "candidate"]),
            "auto_switches": counter("lmserde_wrapper_auto_switches",
                                     "auto: changes of the current candidate", labels=_LABELS),
            "auto_current": core.GaugeMetricFamily(
                "lmserde_wrapper_auto_current", "auto: 1 for the candidate new objects use",
                labels=[*_LABELS, "candidate"]),
            "auto_bandwidth": core.GaugeMetricFamily(
                "lmserde_wrapper_auto_bandwidth_bytes",
                "auto: the adapter's measured throughput, stored bytes per second",
                labels=[*_LABELS, "direction"]),
        }
        for labels, snap, status in self._snapshots():
            self._add_wrapper(fams, labels, snap, status)
        return iter([family for family in fams.values() if family.samples])

    @staticmethod
    def _add_wrapper(fams: dict[str, Any], labels: list[str], snap: dict[str, Any],
                     status: dict[str, Any]) -> None:
        def num(name: str) -> float:
            return float(snap.get(name, 0) or 0)

        fams["store_tasks"].add_metric([*labels, "ok"], num("store_ok"))
        fams["store_tasks"].add_metric([*labels, "failed"], num("store_failed"))
        fams["store_keys"].add_metric(labels, num("store_keys"))
        fams["load_tasks"].add_metric(labels, num("load_tasks"))
        fams["load_keys"].add_metric(labels, num("load_keys"))
        fams["load_hits"].add_metric(labels, num("load_hits"))
        fams["load_misses"].add_metric(labels, max(num("load_keys") - num("load_hits"), 0.0))
        read_also = {str(label): 0 for label in status.get("serde_read_also", ())}
        read_also.update(snap.get("read_also_hits", {}))
        for label, count in sorted(read_also.items()):
            fams["load_hits_read_also"].add_metric([*labels, str(label)], float(count))
        fams["store_bytes"].add_metric([*labels, "kv"], num("store_bytes_kv"))
        fams["store_bytes"].add_metric([*labels, "serialized"], num("store_bytes_serialized"))
        fams["load_bytes"].add_metric([*labels, "serialized"], num("load_bytes_serialized"))
        fams["load_bytes"].add_metric([*labels, "kv"], num("load_bytes_kv"))
        for stage, count in sorted(snap.get("failures", {}).items()):
            fams["failures"].add_metric([*labels, str(stage)], float(count))
        if "rejections" in snap:
            rejections = {reason: 0 for reason in REJECTION_REASONS}
            rejections.update(snap.get("rejections", {}))
            for reason, count in sorted(rejections.items()):
                fams["rejections"].add_metric([*labels, str(reason)], float(count))
        if "repaired" in snap:
            fams["repaired"].add_metric(labels, num("repaired"))
        for stage, summary in sorted(snap.get("latency_seconds", {}).items()):
            fams["stage_seconds"].add_metric([*labels, str(stage)],
                                             count_value=float(summary.get("count", 0)),
                                             sum_value=float(summary.get("total", 0.0)))
        if "is_healthy" in status:
            fams["healthy"].add_metric(labels, 1.0 if status["is_healthy"] else 0.0)
        auto = status.get("serde_auto")
        if auto:
            for candidate, count in sorted(auto.get("choices", {}).items()):
                fams["auto_choices"].add_metric([*labels, str(candidate)], float(count))
                fams["auto_current"].add_metric([*labels, str(candidate)],
                                                1.0 if candidate == auto.get("current") else 0.0)
            fams["auto_switches"].add_metric(labels, float(auto.get("switches", 0)))
            for direction in ("store", "load"):
                bandwidth = auto.get(f"{direction}_bytes_per_second")
                if bandwidth is not None:
                    fams["auto_bandwidth"].add_metric([*labels, direction], float(bandwidth))


_collectors: weakref.WeakKeyDictionary[Any, WrapperCollector] = weakref.WeakKeyDictionary()
_collectors_lock = threading.Lock()


def _collector_for(registry: Any) -> WrapperCollector:
    with _collectors_lock:
        collector = _collectors.get(registry)
        if collector is None:
            collector = WrapperCollector()
            registry.register(collector)
            _collectors[registry] = collector
        return collector


def register_wrapper(wrapper: Any, *, name: str | None = None,
                     registry: Any = None) -> WrapperCollector:
    """Export ``wrapper``'s metrics through ``registry`` (default ``prometheus_client.REGISTRY``).

    ``name`` is the ``adapter`` label (default: the inner adapter's type). Registering the same
    wrapper again under the same name does nothing. Returns the registry's collector. Raises
    ``ImportError`` (with the pip command) without ``prometheus_client``, and ``ValueError`` when
    another live wrapper already has the same labels.
    """
    client = _client()
    collector = _collector_for(client.REGISTRY if registry is None else registry)
    collector.add(wrapper, name)
    return collector


def unregister_wrapper(wrapper: Any, *, registry: Any = None) -> bool:
    """Stop exporting ``wrapper`` through ``registry``; ``False`` if it was not exported there."""
    client = _client()
    with _collectors_lock:
        collector = _collectors.get(client.REGISTRY if registry is None else registry)
    return collector.remove(wrapper) if collector is not None else False
