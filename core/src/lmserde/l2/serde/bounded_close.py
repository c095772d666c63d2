"""A wrapper's shutdown within one bound, even when a plugin call never returns.

:func:`close_within` stops the poll thread, closes the inner adapter and closes the serde, all
under one deadline (the serde's ``close_timeout_s``, default
:data:`~lmserde.options.DEFAULT_CLOSE_TIMEOUT_S`). What did not finish in time is logged as an
error and returned as a :class:`CloseReport`: each hung call named (the serde or adapter, the
call, where its thread is), so the wrapper can record it in its status and keep the buffers a
stuck call may still write.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from lmserde.containment import describe_exception, must_propagate
from lmserde.options import DEFAULT_CLOSE_TIMEOUT_S
from lmserde.worker_pool import describe_thread_stack

__all__ = ["CloseReport", "close_bound_of", "close_within", "call_within", "FINISH_GRACE_S"]

#: Seconds past the bound that failing a wrapper's unfinished tasks may take (each emits an
#: event to the hook plugins): ``close()`` returns within ``close_timeout_s + FINISH_GRACE_S``.
FINISH_GRACE_S = 1.0

_log = logging.getLogger(__name__)


@dataclass
class CloseReport:
    """What a bounded close left running: ``hung`` (one dict per call: ``component`` (e.g.
    ``"serde fp8"``, ``"poll thread"``), ``what`` (one line naming the call, how long it ran and
    where its thread is) and ``where``, plus :meth:`~lmserde.processor.HungCall.as_dict` for a
    serde call), the serde task ids whose calls hung, and whether the inner adapter's close
    did not return."""

    bound_s: float
    deadline: float = 0.0  # time.monotonic() of the bound
    hung: list[dict[str, Any]] = field(default_factory=list)
    serde_task_ids: set[int] = field(default_factory=set)
    inner_hung: bool = False
    #: per further serde (``close_within``'s ``read_serdes``, by position), its hung task ids
    read_serde_task_ids: list[set[int]] = field(default_factory=list)

    def left(self) -> float:
        """Seconds until the bound (0 once past it)."""
        return max(0.0, self.deadline - time.monotonic())


def close_bound_of(serde: Any) -> float:
    """The serde's ``close_timeout_s`` (a processor built by core has one), else the default."""
    bound = getattr(serde, "close_timeout_s", DEFAULT_CLOSE_TIMEOUT_S)
    if isinstance(bound, bool) or not isinstance(bound, (int, float)) or not bound >= 0:
        return DEFAULT_CLOSE_TIMEOUT_S
    return float(bound)


def call_within(fn: Callable[[], None], timeout: float, name: str) -> str | None:
    """Run ``fn`` on a daemon thread for up to ``timeout`` seconds; ``None`` when it returned
    (what it raised is re-raised here), else where its thread is stuck."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as exc:  # handed to the caller
            errors.append(exc)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    thread.join(max(0.0, timeout))
    if thread.is_alive():
        return describe_thread_stack(thread, limit=4) or f"thread {name}"
    if errors:
        raise errors[0]
    return None


def _close_serde(serde: Any, report: CloseReport) -> set[int]:
    """Close one serde within what is left of ``report``'s bound, recording its hung calls in
    ``report``; the task ids of its calls that did not return."""
    from lmserde.processor import AsyncSerdeProcessor

    hung_ids: set[int] = set()
    try:
        if isinstance(serde, AsyncSerdeProcessor):
            serde.close(timeout_s=report.left())
            for call in serde.hung_calls():
                hung_ids.add(call.task_id)
                report.hung.append({"component": f"serde {call.serde_type}",
                                    "what": call.describe(), "where": call.where,
                                    **call.as_dict()})
        else:
            where = call_within(serde.close, report.left(), "lmserde-close-serde")
            if where is not None:
                report.hung.append({"component": f"serde {getattr(serde, 'serde_type', '?')}",
                                    "what": f"close() still running, at {where}",
                                    "where": where})
    except BaseException as exc:  # keep releasing
        if must_propagate(exc):
            raise
        _log.error("serde wrapper: closing the serde raised %s", describe_exception(exc),
                   exc_info=exc)
    return hung_ids


def close_within(loop: Any, inner: Any, serde: Any, adapter_name: str,
                 read_serdes: Sequence[Any] = ()) -> CloseReport:
    """Stop ``loop``, close ``inner``, ``serde`` and then each of ``read_serdes`` (the
    processors of a wrapper's ``read_also`` configurations) within ``close_bound_of(serde)``
    seconds.

    Each part gets what is left of the one deadline. A close that raises is logged and the
    others still run (a main-thread ``KeyboardInterrupt`` propagates). A processor with a
    bounded ``close(timeout_s)`` (every :class:`~lmserde.AsyncSerdeProcessor`) reports its own
    hung calls; any other serde's or adapter's close runs on a daemon thread and is reported
    as hung when it has not returned by the deadline.
    """
    bound = close_bound_of(serde)
    report = CloseReport(bound, time.monotonic() + bound)
    left = report.left

    stuck = loop.stop(timeout=left())
    if stuck is not None:
        report.hung.append({"component": "poll thread", "what": stuck, "where": ""})
    try:
        where = call_within(inner.close, left(), f"lmserde-close-{adapter_name}")
        if where is not None:
            report.inner_hung = True
            report.hung.append({"component": f"L2 adapter {adapter_name}",
                                "what": f"close() still running, at {where}", "where": where})
    except BaseException as exc:  # keep releasing
        if must_propagate(exc):
            raise
        _log.error("serde wrapper: closing the inner adapter raised %s",
                   describe_exception(exc), exc_info=exc)
    report.serde_task_ids = _close_serde(serde, report)
    report.read_serde_task_ids = [_close_serde(other, report) for other in read_serdes]
    for entry in report.hung:
        _log.error("serde wrapper on %s: close() returned after its %g s bound with %s still "
                   "running: %s", adapter_name, bound, entry["component"], entry["what"])
    return report
