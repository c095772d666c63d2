"""One task of the serde wrapper as it moves through its store or load path.

A store goes serialize → inner store; a load goes (stored sizes →) inner load → verify →
deserialize. :class:`WrapperTask` carries what each stage hands the next: the L1 temporaries, the
object layouts and serde bounds, the serde's payload views, and, for a load, the caller positions
of the keys still loading and the refusals so far.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lmserde.containment import describe_exception, must_propagate
from lmserde.keys import ObjectKey
from lmserde.l2.serde.stored_frame import PendingHeader
from lmserde.layout import MemoryLayoutDesc
from lmserde.memory import MemoryObj

__all__ = ["TaskPhase", "WrapperTask", "UnfinishedTask", "NoItemError", "layout_of",
           "contained_submit", "group_slots", "taken_once"]

_log = logging.getLogger("lmserde.l2.serde.wrapper")


class NoItemError(Exception):
    """Stands for the error of an item whose processor reported only that the task failed."""


class TaskPhase(enum.Enum):
    """Where a task is: which component holds its temporaries now."""

    SERIALIZE = "serialize"
    INNER_STORE = "inner_store"
    INNER_LOAD = "inner_load"
    DESERIALIZE = "deserialize"


@dataclass(eq=False)
class WrapperTask:
    """The state of one store or load task (see the module docstring)."""

    task_id: int
    keys: list[ObjectKey]
    phase: TaskPhase
    started: float
    stage_started: float
    num_keys: int = 0
    temp_keys: list[ObjectKey] = field(default_factory=list)
    temps: list[MemoryObj] = field(default_factory=list)
    bytes_kv: int = 0
    stage_seconds: dict[str, float] = field(default_factory=dict)
    layouts: list[MemoryLayoutDesc] = field(default_factory=list)  # object layout per temp
    bounds: list[int] = field(default_factory=list)  # serde bound (payload bytes) per temp
    payloads: list[Any] = field(default_factory=list)  # what the serde wrote into / read from
    # load only
    positions: list[int] = field(default_factory=list)  # caller index of each temp
    dst_items: list[Any] = field(default_factory=list)  # deserialize destination per temp
    dst_objects: list[MemoryObj] = field(default_factory=list)  # the L1 object per temp
    readers: list[int] = field(default_factory=list)  # per temp, the config reader that opened it
    decoding: dict[int, list[int]] = field(default_factory=dict)  # reader -> slots it decodes
    slot_errors: dict[int, BaseException | None] = field(default_factory=dict)  # decoded slots
    hit_slots: list[int] = field(default_factory=list)  # temp indices sent to deserialize
    missed_by_size: int = 0
    rejected: dict[str, int] = field(default_factory=dict)  # load: keys refused, by reason
    confirms: list[Any] = field(default_factory=list)  # load: per temp, waits for its checksum
    writers: list[int] = field(default_factory=list)  # store: per temp, the writer (empty: 0)
    encoding: dict[int, list[int]] = field(default_factory=dict)  # store: writer -> its slots
    encoded: dict[int, float] = field(default_factory=dict)  # store: writer -> serialize seconds
    failed_stage: str | None = None  # store: the first stage a group failed in
    heads: list[PendingHeader] | None = None  # store, head-last: each temp's header to be written

    def end_stage(self, name: str, now: float) -> float:
        """Record that stage ``name`` ended at ``now``; returns its duration in seconds."""
        seconds = now - self.stage_started
        self.stage_seconds[name] = seconds
        self.stage_started = now
        return seconds

    def start_heads(self) -> None:
        """Start the checksum (or MAC) work of the head-last headers: once the inner adapter
        holds the objects, so that its writes go first."""
        for head in self.heads or ():
            head.start()

    def settle_heads(self) -> None:
        """Wait for the checksum threads still reading a store's temporaries (head-last headers
        the inner adapter did not finish); call before the temporaries go back to L1."""
        for head in self.heads or ():
            head.settle()
        self.heads = None


@dataclass(frozen=True)
class UnfinishedTask:
    """A task a closing wrapper took from its path: ``fail()`` completes it as failed (stage
    ``closed``), releasing its temporaries unless ``keeps_temporaries`` (a plugin call that did
    not return may still write them: they are never given back to L1)."""

    fail: Callable[[], None]
    keeps_temporaries: bool


def group_slots(slots: Sequence[int], owners: Sequence[int]) -> dict[int, list[int]]:
    """``slots`` grouped by the configuration each belongs to (``owners[slot]``; an empty
    ``owners``: every slot is configuration 0's), in order: one serde call per group."""
    if not owners:
        return {0: list(slots)}
    groups: dict[int, list[int]] = {}
    for j in slots:
        groups.setdefault(owners[j], []).append(j)
    return groups


def taken_once(in_flight: Iterable[tuple[tuple[int, int], WrapperTask]],
               hung_serde_ids: Mapping[int, Collection[int]]) -> list[tuple[WrapperTask, bool]]:
    """The tasks of ``in_flight`` (``(configuration index, serde task id) -> task`` entries; a
    task with several groups has several), each once, with whether any of its serde tasks is in
    ``hung_serde_ids[configuration index]`` (it then keeps its temporaries)."""
    hung: dict[int, bool] = {}
    tasks: dict[int, WrapperTask] = {}
    for (index, serde_id), task in in_flight:
        tasks[id(task)] = task
        hung[id(task)] = hung.get(id(task), False) or serde_id in hung_serde_ids.get(index, ())
    return [(task, hung[ident]) for ident, task in tasks.items()]


def layout_of(obj: MemoryObj) -> MemoryLayoutDesc:
    """The layout of an L1 object (its own ``layout`` when it has one)."""
    layout = getattr(obj, "layout", None)
    if isinstance(layout, MemoryLayoutDesc):
        return layout
    return MemoryLayoutDesc(obj.get_shapes(), obj.get_dtypes())


def contained_submit(what: str, submit: Callable[[], int],
                     on_interrupt: Callable[[], None]) -> int | None:
    """``submit()`` (a serde's or inner adapter's submit: plugin code); ``None`` when it raised,
    logged. Ctrl-C on the main thread runs ``on_interrupt`` (release what the task holds) and
    propagates."""
    try:
        return submit()
    except BaseException as exc:
        if must_propagate(exc):
            on_interrupt()
            raise
        _log.warning("serde wrapper: %s raised: %s", what, describe_exception(exc))
        return None
