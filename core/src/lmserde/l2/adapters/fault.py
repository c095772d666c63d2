"""``fault``: wraps another adapter and injects failures, deterministically by seed."""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from lmserde.builtin_plugins import BUILTIN_FACTS
from lmserde.containment import describe_exception
from lmserde.install_hints import L2_ADAPTER_GROUP
from lmserde.keys import ObjectKey
from lmserde.l2.adapters.throttled_link import ThrottledLink, check_bandwidth
from lmserde.l2.contract.bitmap import Bitmap
from lmserde.l2.contract.entry_scrub import EntryScrub, scrub_entries_of
from lmserde.l2.contract.inner_delegation import InnerAdapterDelegation
from lmserde.l2.contract.interface import L2AdapterInterface, L2TaskId
from lmserde.l2.contract.poll_loop import PollLoop
from lmserde.l2.contract.replacing_store import enable_replacing_stores
from lmserde.l2.contract.store_result import L2StoreResult
from lmserde.l2.contract.task_queues import AdapterTaskQueues, QueuedResults
from lmserde.l2.discovery.spec import L2AdapterSpec
from lmserde.memory import MemoryObj, as_byte_tensor
from lmserde.options import SerdeOption

__all__ = ["FaultInjectingL2Adapter", "FaultPlan", "InjectedFaultError", "FAULT_ADAPTER_SPEC"]

_log = logging.getLogger(__name__)


class InjectedFaultError(RuntimeError):
    """Raised by a ``submit_*`` call the fault plan chose to fail."""


#: Seeds are 128-bit signed integers (they key the decision hash).
SEED_MIN, SEED_MAX = -(2**127), 2**127 - 1
#: Longest injected delay, in seconds.
MAX_DELAY_SECONDS = 3600.0




def _check_rate(name: str, value: float) -> float:
    rate = float(value)
    if not 0.0 <= rate <= 1.0:  # also refuses NaN
        raise ValueError(f"fault adapter: {name} must be within [0, 1], got {value!r}")
    return rate


def _check_delay(value: float) -> float:
    delay = float(value)
    if not 0.0 <= delay <= MAX_DELAY_SECONDS:  # also refuses NaN and infinity
        raise ValueError(f"fault adapter: delay_seconds must be within [0, "
                         f"{MAX_DELAY_SECONDS:g}], got {value!r}")
    return delay


def _check_seed(value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"fault adapter: seed must be an integer, got {value!r}")
    if not SEED_MIN <= value <= SEED_MAX:
        raise ValueError(
            f"fault adapter: seed must be a 128-bit signed integer within [-2**127, 2**127 - 1], "
            f"got {value!r}"
        )
    return value


@dataclass(frozen=True)
class FaultPlan:
    """What to inject. Rates are probabilities in ``[0, 1]``, decided by hashing ``seed``.

    * ``store_failure_rate`` (per store task): the task fails without reaching the inner adapter.
    * ``load_miss_rate`` (per key): a key the inner adapter loaded is reported as a miss.
    * ``corrupt_rate`` (per key): one byte of a loaded object is flipped (the load still hits).
    * ``submit_exception_rate`` (per store/load submit): ``submit_*`` raises
      :class:`InjectedFaultError`.
    * ``delay_rate`` / ``delay_seconds`` (per store/load task): the result is held back for up
      to ``delay_seconds``.
    * ``miss_chunk_hashes``: keys with these chunk hashes always miss on load.
    * ``bandwidth_bytes_per_second`` (per direction; 0: unthrottled): a store or load task's
      result is held back until its bytes (the objects' sizes) have crossed a link of this
      bandwidth, tasks one after another (:class:`ThrottledLink`); the adapter's
      :meth:`~FaultInjectingL2Adapter.set_bandwidth` changes it while the adapter runs.

    The same seed, keys and operation always give the same decision.
    """

    seed: int = 0
    store_failure_rate: float = 0.0
    load_miss_rate: float = 0.0
    corrupt_rate: float = 0.0
    submit_exception_rate: float = 0.0
    delay_rate: float = 0.0
    delay_seconds: float = 0.0
    miss_chunk_hashes: frozenset[bytes] = frozenset()
    bandwidth_bytes_per_second: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "bandwidth_bytes_per_second",
                           check_bandwidth(self.bandwidth_bytes_per_second))
        for name in ("store_failure_rate", "load_miss_rate", "corrupt_rate",
                     "submit_exception_rate", "delay_rate"):
            object.__setattr__(self, name, _check_rate(name, getattr(self, name)))
        object.__setattr__(self, "delay_seconds", _check_delay(self.delay_seconds))
        object.__setattr__(self, "seed", _check_seed(self.seed))
        object.__setattr__(self, "miss_chunk_hashes", frozenset(self.miss_chunk_hashes))

    def draw(self, kind: str, keys: Iterable[ObjectKey]) -> float:
        """A deterministic number in ``[0, 1)`` for (seed, ``kind``, ``keys``)."""
        h = hashlib.blake2b(digest_size=8, key=int(self.seed).to_bytes(16, "little", signed=True))
        h.update(kind.encode())
        for key in keys:
            for part in (key.chunk_hash, key.model_name.encode(), key.cache_salt.encode(),
                         key.kv_rank.to_bytes(16, "little", signed=True),
                         key.object_group_id.to_bytes(8, "little")):
                h.update(len(part).to_bytes(4, "little"))
                h.update(part)
        return int.from_bytes(h.digest(), "little") / 2.0**64

    def hits(self, kind: str, rate: float, keys: Iterable[ObjectKey]) -> bool:
        return rate > 0.0 and self.draw(kind, keys) < rate

    def delay_for(self, kind: str, keys: Sequence[ObjectKey]) -> float:
        if not self.hits(kind + "/delay", self.delay_rate, keys):
            return 0.0
        return self.delay_seconds * self.draw(kind + "/delay-length", keys)


class FaultInjectingL2Adapter(InnerAdapterDelegation, QueuedResults, L2AdapterInterface):
    """An adapter in front of ``inner`` that injects the faults of a :class:`FaultPlan`.

    Lookups, unlocks, sizes, deletes and usage pass straight through. Store and load results
    arrive on this adapter's own fds (a poll thread named ``lmserde-fault`` relays them), held
    back by the plan's delays and by its bandwidth (one :class:`ThrottledLink` per direction).
    ``report_status()`` adds a ``fault_inject`` dict of counts. Closing closes ``inner``.
    """

    adapter_type = "fault"

    def __init__(self, inner: L2AdapterInterface, plan: FaultPlan | None = None) -> None:
        super().__init__(inner.max_capacity_bytes)
        self._inner = inner
        self._plan = plan if plan is not None else FaultPlan()
        self._queues = AdapterTaskQueues()
        self._lock = threading.Lock()
        self._stores: dict[int, tuple[int, float, bool]] = {}  # task id, until, delayed
        self._loads: dict[int, tuple[int, list[ObjectKey], list[MemoryObj], float, bool]] = {}
        self._counts = dict.fromkeys(("store_failures", "load_misses", "corruptions",
                                      "submit_exceptions", "delays"), 0)
        self._closed = False
        self._links = {"store": ThrottledLink(self._plan.bandwidth_bytes_per_second),
                       "load": ThrottledLink(self._plan.bandwidth_bytes_per_second)}
        self._loop = PollLoop("lmserde-fault")
        self._loop.add_fd(inner.get_store_event_fd(), self._drain_stores)
        self._loop.add_fd(inner.get_load_event_fd(), self._drain_loads)
        self._loop.start()

    @property
    def inner_adapter(self) -> L2AdapterInterface:
        return self._inner

    def scrub_entries(self, *, delete: bool = False) -> EntryScrub | None:
        """The inner adapter's entry scrub (faults are injected into tasks, not into storage);
        ``None`` when it has none."""
        return scrub_entries_of(self._inner, delete=delete)

    def replace_existing_on_store(self) -> bool:
        """Replacing stores are the inner adapter's: switches it when it offers them (see
        :func:`~lmserde.l2.contract.replacing_store.enable_replacing_stores`); whether it did."""
        return enable_replacing_stores(self._inner)

    @property
    def plan(self) -> FaultPlan:
        return self._plan

    def set_bandwidth(self, bytes_per_second: float, direction: str | None = None) -> None:
        """Throttle both directions (or ``"store"`` / ``"load"``) from now on (0: unthrottled)."""
        if direction not in (None, "store", "load"):
            raise ValueError(f"direction is 'store', 'load' or None, not {direction!r}")
        for name, link in self._links.items():
            if direction in (None, name):
                link.set_bandwidth(bytes_per_second)

    def _held_back(self, delay: float, direction: str, objects: Sequence[MemoryObj]) -> float:
        """When (monotonic) a result may complete: after ``delay``, its bytes over the link."""
        link = self._links[direction]
        end = link.reserve(sum(o.get_size() for o in objects)) if link.bandwidth else 0.0
        return max(time.monotonic() + delay, end)

    def _count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._counts[name] += n

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("FaultInjectingL2Adapter is closed")

    def _maybe_raise(self, kind: str, keys: Sequence[ObjectKey]) -> None:
        if self._plan.hits(kind + "/raise", self._plan.submit_exception_rate, keys):
            self._count("submit_exceptions")
            raise InjectedFaultError(f"fault adapter: injected exception from submit_{kind}_task")

    def _finish(self, until: float, complete: Any, task_id: int, result: Any,
                delayed: bool) -> None:  # now, or at ``until`` (time.monotonic()) if later
        if delayed:
            self._count("delays")
        wait = until - time.monotonic()
        if wait > 0.0:
            self._loop.call_later(wait, lambda: complete(task_id, result))
        else:
            complete(task_id, result)

    # -- store ----------------------------------------------------------------------------------

    def submit_store_task(
        self, keys: Sequence[ObjectKey], objects: Sequence[MemoryObj]
    ) -> L2TaskId:
        self._check_open()
        keys = list(keys)
        self._maybe_raise("store", keys)
        task_id = self._queues.new_task_id()
        delay = self._plan.delay_for("store", keys)
        if self._plan.hits("store/fail", self._plan.store_failure_rate, keys):
            self._count("store_failures")
            self._finish(time.monotonic() + delay, self._queues.store.complete, task_id,
                         L2StoreResult(False, 0), delay > 0.0)
            return task_id
        until = self._held_back(delay, "store", objects)
        with self._lock:  # registered before the relay thread can see the inner result
            inner_id = self._inner.submit_store_task(keys, objects)
            self._stores[inner_id] = (task_id, until, delay > 0.0)
        return task_id

    def _drain_stores(self) -> None:
        with self._lock:
            done = self._inner.pop_completed_store_tasks()
            mine = [(self._stores.pop(i), r) for i, r in done.items() if i in self._stores]
        for (task_id, until, delayed), result in mine:
            try:
                self._finish(until, self._queues.store.complete, task_id, result, delayed)
            except BaseException as exc:  # relay thread: the task must complete
                _log.error("fault adapter: store task %d could not be relayed (%s); failed",
                           task_id, describe_exception(exc))
                self._queues.store.complete(task_id, L2StoreResult(False, 0))

    # -- load -----------------------------------------------------------------------------------

    def submit_load_task(
        self, keys: Sequence[ObjectKey], objects: Sequence[MemoryObj]
    ) -> L2TaskId:
        self._check_open()
        keys, objects = list(keys), list(objects)
        self._maybe_raise("load", keys)
        task_id = self._queues.new_task_id()
        delay = self._plan.delay_for("load", keys)
        until = self._held_back(delay, "load", objects)
        with self._lock:
            inner_id = self._inner.submit_load_task(keys, objects)
            self._loads[inner_id] = (task_id, keys, objects, until, delay > 0.0)
        return task_id

    def _drain_loads(self) -> None:
        with self._lock:
            pending = list(self._loads.items())
        for inner_id, (task_id, keys, objects, until, delayed) in pending:
            bitmap = self._inner.query_load_result(inner_id)
            if bitmap is None:
                continue
            with self._lock:
                del self._loads[inner_id]
            try:
                self._finish(until, self._queues.load.complete, task_id,
                             self._apply_load_faults(bitmap, keys, objects), delayed)
            except BaseException as exc:  # relay thread: the task must complete
                _log.error("fault adapter: load task %d could not be relayed (%s); every key "
                           "misses", task_id, describe_exception(exc))
                self._queues.load.complete(task_id, Bitmap(len(keys)))

    def _apply_load_faults(
        self, bitmap: Bitmap, keys: list[ObjectKey], objects: list[MemoryObj]
    ) -> Bitmap:
        plan = self._plan
        for i in bitmap.set_indices():
            key = keys[i]
            if key.chunk_hash in plan.miss_chunk_hashes or plan.hits(
                    "load/miss", plan.load_miss_rate, [key]):
                bitmap.clear(i)
                self._count("load_misses")
            elif plan.hits("load/corrupt", plan.corrupt_rate, [key]):
                data = as_byte_tensor(objects[i])
                if data.numel():
                    pos = int(plan.draw("load/corrupt-at", [key]) * data.numel())
                    data[pos] ^= 0xFF
                    self._count("corruptions")
        return bitmap

    # -- pass-through extras --------------------------------------------------------------------

    def report_status(self) -> dict[str, Any]:
        status = dict(self._inner.report_status())
        with self._lock:
            status["fault_inject"] = dict(self._counts, seed=self._plan.seed)
        return status

    def close(self) -> None:
        """Stop relaying, close ``inner`` and this adapter's fds; idempotent.

        Tasks still in flight are dropped.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._loop.stop()
        self._inner.close()
        self._queues.close()


def _parse_chunk_hashes(value: Any) -> frozenset[bytes]:
    if value is None:
        return frozenset()
    if isinstance(value, (str, bytes)):
        value = [value]
    hashes: set[bytes] = set()
    for item in value:
        if isinstance(item, bytes):
            hashes.add(item)
        elif isinstance(item, str):
            try:
                hashes.add(bytes.fromhex(item))
            except ValueError:
                raise ValueError(
                    f"fault adapter: miss_chunk_hashes entries must be hex strings, got {item!r}"
                ) from None
        else:
            raise ValueError(
                f"fault adapter: miss_chunk_hashes entries must be hex strings, got {item!r}"
            )
    return frozenset(hashes)


def _check_inner(value: Any) -> None:
    if not isinstance(value, dict):
        raise ValueError(
            f"option 'inner' must be an adapter spec dict such as {{'type': 'memory'}}, got "
            f"{type(value).__name__}"
        )


def _create_fault(options: dict[str, Any], l1_manager: Any) -> FaultInjectingL2Adapter:
    from lmserde.l2.build import create_l2_adapter

    plan = FaultPlan(
        seed=options["seed"],
        store_failure_rate=options["store_failure_rate"],
        load_miss_rate=options["load_miss_rate"],
        corrupt_rate=options["corrupt_rate"],
        submit_exception_rate=options["submit_exception_rate"],
        delay_rate=options["delay_rate"],
        delay_seconds=options["delay_seconds"],
        miss_chunk_hashes=_parse_chunk_hashes(options["miss_chunk_hashes"]),
        bandwidth_bytes_per_second=options["bandwidth_bytes_per_second"],
    )
    return FaultInjectingL2Adapter(create_l2_adapter(options["inner"], l1_manager), plan)


def _rate(name: str, help_text: str) -> SerdeOption:
    def check(value: float) -> None:
        _check_rate(name, value)

    return SerdeOption(name, float, 0.0, help_text, check=check)


FAULT_ADAPTER_SPEC = L2AdapterSpec(
    factory=_create_fault,
    description=BUILTIN_FACTS[L2_ADAPTER_GROUP]["fault"].description,
    options=(
        SerdeOption("inner", object, None, "spec dict of the wrapped adapter", required=True,
                    check=_check_inner),
        SerdeOption("seed", int, 0, "seed of every fault decision (a 128-bit signed integer)",
                    minimum=SEED_MIN, maximum=SEED_MAX),
        _rate("store_failure_rate", "fraction of store tasks that fail"),
        _rate("load_miss_rate", "fraction of loaded keys reported as misses"),
        _rate("corrupt_rate", "fraction of loaded keys with one byte flipped"),
        _rate("submit_exception_rate", "fraction of store/load submits that raise"),
        _rate("delay_rate", "fraction of store/load tasks whose result is held back"),
        SerdeOption("delay_seconds", float, 0.0, "longest injected delay (seconds)",
                    minimum=0.0, maximum=MAX_DELAY_SECONDS),
        SerdeOption("miss_chunk_hashes", object, (), "chunk hashes (hex) that always miss"),
        SerdeOption("bandwidth_bytes_per_second", float, 0.0,
                    "throttle each direction (stores, loads) to this many bytes per second, "
                    "tasks one after another (0: unthrottled)", minimum=0.0),
    ),
    reports_object_sizes=None,
)
