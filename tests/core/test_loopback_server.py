"""lmserde.testing.loopback_server: the helpers behind the plugins' throwaway loopback servers."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from lmserde.testing import (
    LOOPBACK_HOST,
    LoopbackChildServer,
    free_loopback_port,
    kill_child,
    log_tail,
    start_child,
    stop_child,
    wait_until,
)

# A child that ignores SIGTERM, so only SIGKILL ends it; it says when its handler is in place.
_STUBBORN = ("import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
             "print('ready', flush=True); time.sleep(60)")


def test_a_free_port_can_be_bound_and_avoids_excluded_ports() -> None:
    port = free_loopback_port()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK_HOST, port))
    assert free_loopback_port(exclude=[port]) != port


def test_wait_until_retries_listed_errors_and_times_out_with_the_log_tail(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("".join(f"line {i}\n" for i in range(20)))
    calls = []

    def probe() -> bool:
        calls.append(1)
        raise ConnectionRefusedError("not yet")

    with pytest.raises(TimeoutError) as info:
        wait_until(probe, "server answering", 0.2, log=log)
    assert len(calls) > 1
    assert "server answering not reached within 0.2 s" in str(info.value)
    assert "line 19" in str(info.value) and "line 4\n" not in str(info.value)
    assert log_tail(tmp_path / "missing.log") == "(no log)"


def test_wait_until_returns_when_true_and_propagates_other_errors() -> None:
    answers = iter([False, True])
    wait_until(lambda: next(answers), "second probe", 5.0)

    def died() -> bool:
        raise RuntimeError("server exited")

    with pytest.raises(RuntimeError, match="server exited"):
        wait_until(died, "never", 5.0)


def test_stop_child_asks_first_then_terminates_then_kills_within_its_bound() -> None:
    polite = start_child([sys.executable, "-c", "import sys; sys.stdin.read()"],
                         stdin=subprocess.PIPE)
    assert polite.stdin is not None
    stop_child(polite, grace_s=5.0, ask=polite.stdin.close)
    assert polite.returncode == 0  # it ended on its own when asked

    stubborn = start_child([sys.executable, "-c", _STUBBORN], stdout=subprocess.PIPE, text=True)
    assert stubborn.stdout is not None and stubborn.stdout.readline() == "ready\n"
    started = time.monotonic()
    stop_child(stubborn, grace_s=0.3)
    # SIGTERM is ignored, so SIGKILL ends it after one grace period; 5 s is generous for a
    # loaded machine yet far below the child's 60 s sleep
    assert time.monotonic() - started < 5.0
    assert stubborn.returncode == -9
    stubborn.stdout.close()
    stop_child(stubborn)  # idempotent


def test_kill_child_kills_and_reaps() -> None:
    child = start_child([sys.executable, "-c", "import time; time.sleep(60)"])
    kill_child(child, group=True)
    assert child.returncode == -9
    kill_child(child)  # already gone: nothing to do


class _EchoServer(LoopbackChildServer):
    """A TCP server in a child Python process: the smallest real server on the base."""

    def __init__(self) -> None:
        self.port = free_loopback_port()

    def start(self) -> _EchoServer:
        if self.running:
            return self
        code = ("import socket, sys; s = socket.create_server((sys.argv[1], int(sys.argv[2]))); "
                "s.accept()[0].sendall(b'hi'); s.accept()")
        self._process = start_child([sys.executable, "-c", code, LOOPBACK_HOST, str(self.port)])

        def answers() -> bool:
            with socket.create_connection((LOOPBACK_HOST, self.port), timeout=2) as c:
                return c.recv(2) == b"hi"

        wait_until(answers, f"echo server on port {self.port}", 30, retry_on=(OSError,))
        return self

    def close(self) -> None:
        if self._process is not None:
            stop_child(self._process, grace_s=2)


def test_a_child_server_reports_its_process_and_stops_when_the_with_block_ends() -> None:
    server = _EchoServer()
    assert not server.running and server.pid is None
    with server as started:
        assert started is server and server.running
        assert server.pid is not None and server.pid == server._process.pid  # type: ignore[union-attr]
    assert not server.running and server.pid is None
    with pytest.raises(TypeError, match="abstract"):
        LoopbackChildServer()  # type: ignore[abstract]
