"""A bounded soak: several submitting threads, random injected faults, real files.

Every task completes; no temporary leaks; every key a load reports as hit holds exactly the bytes
that were stored under it; keys never stored (or whose store failed) always miss.
"""

from __future__ import annotations

import random
import select
import threading
from pathlib import Path

import torch
from datapath_driver import key_of, live_threads, open_fds
from lmserde import MemoryLayoutDesc, ObjectKey, as_byte_tensor
from lmserde.events import consume_fd, create_event_notifier
from lmserde.l1 import L1Error, L1Manager
from lmserde.l2 import Bitmap, L2AdapterInterface, L2StoreResult, create_l2_adapter
from lmserde.testing import random_object

THREADS = 4
TASKS_PER_THREAD = 250
TIMEOUT = 30.0
LAYOUTS = [
    MemoryLayoutDesc([[4, 2, 16]], [torch.float16]),
    MemoryLayoutDesc([[2, 2, 32]], [torch.bfloat16]),
    MemoryLayoutDesc([[3, 5], [7]], [torch.float32, torch.float16]),
]


class Collector:
    """The single consumer of a shared adapter's store and load fds, for many waiting threads."""

    def __init__(self, adapter: L2AdapterInterface) -> None:
        self._adapter = adapter
        self._cond = threading.Condition()
        self._stores: dict[int, L2StoreResult] = {}
        self._loads: dict[int, Bitmap] = {}
        self._watched: set[int] = set()
        self._wake = create_event_notifier()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="soak-collector", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        poller = select.poll()
        fds = (self._adapter.get_store_event_fd(), self._adapter.get_load_event_fd(),
               self._wake.fileno())
        for fd in fds:
            poller.register(fd, select.POLLIN)
        while not self._stop:
            for fd, _ in poller.poll(1000):
                consume_fd(fd)
            done = self._adapter.pop_completed_store_tasks()
            with self._cond:
                watched = list(self._watched)
            loads = {t: r for t in watched if (r := self._adapter.query_load_result(t)) is not None}
            with self._cond:
                self._stores.update(done)
                self._loads.update(loads)
                self._watched.difference_update(loads)
                self._cond.notify_all()

    def store(self, keys: list[ObjectKey], objs: list) -> L2StoreResult:
        task = self._adapter.submit_store_task(keys, objs)
        with self._cond:
            assert self._cond.wait_for(lambda: task in self._stores, TIMEOUT), "store never done"
            return self._stores.pop(task)

    def load(self, keys: list[ObjectKey], objs: list) -> Bitmap:
        task = self._adapter.submit_load_task(keys, objs)
        with self._cond:
            self._watched.add(task)
        self._wake.notify()  # the completion may have been signalled before we watched it
        with self._cond:
            assert self._cond.wait_for(lambda: task in self._loads, TIMEOUT), "load never done"
            return self._loads.pop(task)

    def close(self) -> None:
        self._stop = True
        self._wake.notify()
        self._thread.join(TIMEOUT)
        self._wake.close()


def test_soak_with_random_faults(tmp_path: Path) -> None:
    fds, threads = open_fds(), live_threads()
    l1 = L1Manager(64 << 20)
    adapter = create_l2_adapter({
        "type": "fault", "seed": 1234,
        "inner": {"type": "fs", "base_path": str(tmp_path), "io_workers": 2},
        "store_failure_rate": 0.05, "load_miss_rate": 0.05, "corrupt_rate": 0.05,
        "submit_exception_rate": 0.03, "delay_rate": 0.1, "delay_seconds": 0.002,
        "serde": {"type": "t_crc", "max_workers": 2},
    }, l1)
    collector = Collector(adapter)
    stored: dict[ObjectKey, tuple[int, torch.Tensor]] = {}
    failed: set[ObjectKey] = set()
    lock = threading.Lock()
    counter = iter(range(10**9))
    errors: list[BaseException] = []
    tallies = {"stores": 0, "loads": 0, "hits": 0, "keys": 0}

    def work(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for _ in range(TASKS_PER_THREAD):
                with lock:
                    known = list(stored)
                    lost = list(failed)
                if not known or rng.random() < 0.5:
                    layout_index = rng.randrange(len(LAYOUTS))
                    with lock:
                        ids = [next(counter) for _ in range(rng.randint(1, 3))]
                    keys = [key_of(i, tag=bytes([layout_index])) for i in ids]
                    objs = [random_object(LAYOUTS[layout_index], i) for i in ids]
                    result = collector.store(keys, objs)
                    with lock:
                        tallies["stores"] += 1
                        tallies["keys"] += len(keys)
                        for key, obj in zip(keys, objs):
                            if result.is_successful():
                                stored[key] = (layout_index, as_byte_tensor(obj).clone())
                            else:
                                failed.add(key)
                    continue
                keys = rng.sample(known, min(len(known), rng.randint(1, 3)))
                if lost and rng.random() < 0.3:
                    keys.append(rng.choice(lost))
                if rng.random() < 0.2:
                    keys.append(key_of(10**12 + rng.randrange(10**6), tag=b"\x00"))
                layouts = [LAYOUTS[k.chunk_hash[0]] for k in keys]
                reserved = l1.reserve_write(keys, False, layouts)
                if any(reserved[k][0] is not L1Error.SUCCESS for k in keys):
                    l1.finish_write_and_delete([k for k in keys
                                                if reserved[k][0] is L1Error.SUCCESS])
                    continue  # another thread holds one of these keys right now
                dsts = [reserved[k][1] for k in keys]
                bitmap = collector.load(keys, dsts)
                try:
                    for i, key in enumerate(keys):
                        if not bitmap.test(i):
                            continue
                        assert key in stored, "a key that was never stored hit"
                        assert torch.equal(as_byte_tensor(dsts[i]), stored[key][1]), \
                            "a hit returned wrong bytes"
                finally:
                    l1.finish_write_and_delete(keys)
                with lock:
                    tallies["loads"] += 1
                    tallies["keys"] += len(keys)
                    tallies["hits"] += bitmap.count()
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    workers = [threading.Thread(target=work, args=(s,)) for s in range(THREADS)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
    assert not any(w.is_alive() for w in workers), "a worker hung"
    collector.close()
    assert not errors, errors[0]
    status = adapter.report_status()
    adapter.close()

    metrics = status["serde_wrapper"]
    assert metrics["store_tasks"] == tallies["stores"]
    assert metrics["load_tasks"] == tallies["loads"]
    assert metrics["load_hits"] == tallies["hits"]
    assert tallies["keys"] > 2000
    assert tallies["hits"] > 0 and failed, "the soak must see both hits and failures"
    faults = status["fault_inject"]
    assert all(faults[k] > 0 for k in ("store_failures", "load_misses", "corruptions",
                                       "submit_exceptions", "delays")), faults
    assert sum(metrics["rejections"].values()) > 0  # corrupted bytes were caught by the frame
    assert l1.memory_used_bytes() == 0 and l1.num_objects() == 0
    assert l1.pool_stats().hits > 0
    assert not {t for t in live_threads() - threads if (t.join(TIMEOUT) or t.is_alive())}
    assert open_fds() == fds
