"""TaskGate, TaskDeadlines and BusyWorkers (lmserde.l2.contract.task_deadline), and the
TrickleProxy of lmserde.testing, with real threads and real sockets."""

from __future__ import annotations

import socket
import threading
import time

import pytest
from lmserde.l2 import BusyWorkers, TaskDeadlines, check_task_deadline
from lmserde.testing import TrickleProxy


def test_a_gate_reports_once_and_refuses_copies_after_its_deadline() -> None:
    delivered: list[str] = []
    deadlines = TaskDeadlines(0.2, "test")
    try:
        gate = deadlines.start(delivered.append, lambda: "failed")
        assert gate.while_open(lambda: "copied") == (True, "copied")
        end = time.monotonic() + 5
        while not delivered:
            assert time.monotonic() < end, "the deadline never fired"
            time.sleep(0.01)
        assert delivered == ["failed"] and gate.expired
        assert gate.while_open(lambda: "late copy") == (False, None)
        assert gate.finish("late result") is False
        assert delivered == ["failed"]
    finally:
        deadlines.close()


def test_a_gate_finished_in_time_never_expires_and_before_runs_only_for_the_winner() -> None:
    delivered: list[str] = []
    pinned: list[str] = []
    deadlines = TaskDeadlines(0.3, "test")
    try:
        gate = deadlines.start(delivered.append, lambda: "failed")
        assert gate.finish("ok", before=lambda: pinned.append("hit")) is True
        assert gate.finish("again", before=lambda: pinned.append("late")) is False
        time.sleep(0.6)
        assert delivered == ["ok"] and pinned == ["hit"] and not gate.expired
    finally:
        deadlines.close()


def test_close_abandons_open_gates_without_reporting_them() -> None:
    delivered: list[str] = []
    deadlines = TaskDeadlines(30, "test")
    gate = deadlines.start(delivered.append, lambda: "failed")
    deadlines.close()
    assert gate.finish("late") is False and delivered == []
    with pytest.raises(RuntimeError, match="closed"):
        deadlines.start(delivered.append, lambda: "failed")


def test_deadlines_fire_in_order_whatever_the_registration_order() -> None:
    order: list[str] = []
    slow = TaskDeadlines(0.6, "slow")
    fast = TaskDeadlines(0.1, "fast")
    try:
        slow.start(order.append, lambda: "slow")
        fast.start(order.append, lambda: "fast")
        end = time.monotonic() + 5
        while len(order) < 2:
            assert time.monotonic() < end
            time.sleep(0.01)
        assert order == ["fast", "slow"]
    finally:
        slow.close()
        fast.close()


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), "30", True, None])
def test_deadline_values_are_checked(bad: object) -> None:
    with pytest.raises(ValueError, match="task_deadline_s"):
        check_task_deadline(bad)  # type: ignore[arg-type]
    assert check_task_deadline(2) == 2.0


def test_busy_workers_wait_idle_is_bounded() -> None:
    busy = BusyWorkers()
    release = threading.Event()
    thread = threading.Thread(target=busy.run, args=(release.wait,))
    thread.start()
    try:
        started = time.monotonic()
        assert busy.wait_idle(0.2) is False
        assert 0.15 <= time.monotonic() - started < 5
        assert busy.running == 1
    finally:
        release.set()
        thread.join()
    assert busy.wait_idle(1) is True and busy.running == 0


def _echo_server() -> socket.socket:
    listener = socket.create_server(("127.0.0.1", 0))

    def echo(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(4096):
                conn.sendall(data)

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=echo, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return listener


def test_the_proxy_trickles_then_forwards_at_full_speed() -> None:
    listener = _echo_server()
    with TrickleProxy("127.0.0.1", listener.getsockname()[1], interval=0.1,
                      trickling=True) as proxy, \
            socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as client:
        client.sendall(b"abcdef")
        started = time.monotonic()
        assert client.recv(100) == b"a"  # one byte at a time
        got = b"a"
        while len(got) < 3:
            got += client.recv(100)
        assert time.monotonic() - started >= 0.15  # bytes 2 and 3 each waited for the interval
        proxy.set_trickling(False)
        while len(got) < 6:
            got += client.recv(100)
        assert got == b"abcdef"
        client.sendall(b"x" * 100_000)
        started, echoed = time.monotonic(), 0
        while echoed < 100_000:
            echoed += len(client.recv(1 << 16))
        assert time.monotonic() - started < 5  # 100 kB would take hours trickled
        assert proxy.connections == 1
    listener.close()  # the daemon echo threads end with the test process


def test_the_proxy_stops_by_itself_after_its_lifetime() -> None:
    listener = _echo_server()
    proxy = TrickleProxy("127.0.0.1", listener.getsockname()[1], lifetime_s=0.5)
    try:
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=2) as probe:
            probe.sendall(b"?")
            assert probe.recv(1) == b"?"  # forwarding while alive
        end = time.monotonic() + 5
        while True:
            try:
                with socket.create_connection(("127.0.0.1", proxy.port), timeout=1) as probe:
                    probe.settimeout(1)
                    probe.sendall(b"?")
                    if probe.recv(1) == b"":
                        break
            except OSError:
                break
            assert time.monotonic() < end, "the proxy kept running past its lifetime"
            time.sleep(0.1)
    finally:
        proxy.close()
        listener.close()


def test_abort_actions_run_at_the_deadline_unless_unregistered() -> None:
    delivered: list[str] = []
    aborted: list[str] = []
    deadlines = TaskDeadlines(0.2, "test")
    try:
        gate = deadlines.start(delivered.append, lambda: "failed")
        gate.on_expire(lambda: aborted.append("socket"))
        unregister = gate.on_expire(lambda: aborted.append("finished round trip"))
        unregister()
        gate.on_expire(lambda: 1 / 0)  # a failing abort is contained
        end = time.monotonic() + 5
        while not aborted:
            assert time.monotonic() < end, "the abort never ran"
            time.sleep(0.01)
        assert delivered == ["failed"] and aborted == ["socket"]
        gate.on_expire(lambda: aborted.append("late"))  # registered after expiry: runs at once
        assert aborted == ["socket", "late"]
        done = deadlines.start(delivered.append, lambda: "failed")
        done.on_expire(lambda: aborted.append("never"))
        assert done.finish("ok")
        time.sleep(0.4)
        assert "never" not in aborted
    finally:
        deadlines.close()


def test_a_reported_gate_drops_its_references_and_close_abandons_only_open_ones() -> None:
    import gc
    import weakref

    class Payload:
        pass

    deadlines = TaskDeadlines(30, "test")
    payload = Payload()
    ref = weakref.ref(payload)
    done = deadlines.start(lambda result, p=payload: None, lambda: None)
    assert done.finish("ok")
    del payload
    gc.collect()
    assert ref() is None, "a finished gate still queued for its deadline kept the task's data"
    open_gate = deadlines.start(lambda result: None, lambda: None)
    deadlines.close()  # abandons the open gate; the finished one is left as it is
    assert not open_gate.is_open and open_gate.finish("late") is False
