"""Warnings and log records raised while one serde is measured, collected for its result.

A failing serde logs each failed item (the processor does) and may warn; printed in the middle of
progress bars these lines are noise, and the run reports the failure anyway. The bench collects
them per serde instead (and, when asked, keeps them off the console meanwhile).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["capture_diagnostics", "MAX_DIAGNOSTICS"]

#: Distinct messages kept per block (a serde failing on every item could log thousands).
MAX_DIAGNOSTICS = 50


class _Collector(logging.Handler):
    def __init__(self, sink: dict[str, None]) -> None:
        super().__init__(logging.WARNING)
        self._sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        if len(self._sink) >= MAX_DIAGNOSTICS:
            return
        try:
            self._sink[f"log {record.levelname.lower()} {record.name}: {record.getMessage()}"] = None
        except Exception:  # a broken record must not break the measurement
            self.handleError(record)


def _drop_all(record: logging.LogRecord) -> bool:
    return False


@contextmanager
def capture_diagnostics(*, mute: bool = False, into: list[str] | None = None) -> Iterator[list[str]]:
    """Collect Python warnings and WARNING+ log records raised inside the block.

    The yielded list is filled, in order of first appearance and without repeats (at most
    :data:`MAX_DIAGNOSTICS`), when the block exits. ``into``: a list of messages collected
    before (by earlier blocks of the same serde); the new ones are added to it, the same rules
    counting the ones it holds, and it is the list yielded. With ``mute`` the root logger's
    other handlers drop records meanwhile (warnings are never shown while collected). Not
    reentrant across threads: one measurement at a time.
    """
    out: list[str] = into if into is not None else []
    found: dict[str, None] = dict.fromkeys(out)
    root = logging.getLogger()
    collector = _Collector(found)
    muted = list(root.handlers) if mute else []
    for handler in muted:
        handler.addFilter(_drop_all)
    root.addHandler(collector)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                yield out
            finally:
                for w in caught:
                    if len(found) < MAX_DIAGNOSTICS:
                        found[f"{w.category.__name__}: {w.message}"] = None
    finally:
        root.removeHandler(collector)
        for handler in muted:
            handler.removeFilter(_drop_all)
        out[:] = found
