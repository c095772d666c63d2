"""``TaskOutcome``: the result of one finished serde task, item by item.

What :meth:`~lmserde.SerdeProcessor.query_serialize_outcome` returns. Re-exported by
:mod:`lmserde.processor` and by ``lmserde``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TaskOutcome"]


@dataclass(frozen=True)
class TaskOutcome:
    """Result of one finished task: overall ``ok`` and the error of each item (``None`` = ok)."""

    ok: bool
    item_errors: tuple[BaseException | None, ...]

    @property
    def failed_items(self) -> tuple[int, ...]:
        return tuple(i for i, e in enumerate(self.item_errors) if e is not None)

