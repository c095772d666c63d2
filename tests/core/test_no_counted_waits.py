"""Tests wait on time, never on loop counts: no ``for _ in range(N)`` around a poll.

A loop that counts ``poll(10)`` turns on an fd it never drains finishes its budget in a few
milliseconds on a loaded machine (issue #17's flaky bridge test). Waits go through
``lmserde.events.wait_on_fd`` or an explicit ``time.monotonic()`` deadline instead.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
WAITING_CALLS = {"poll", "select", "epoll"}


def _waiting_call_names(node: ast.AST) -> list[str]:
    names = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            func = sub.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in WAITING_CALLS:
                names.append(name)
    return names


def _is_range_call(node: ast.AST) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "range")


def counted_waits(source: str) -> list[int]:
    """Line numbers of ``for ... in range(...)`` loops whose body polls an fd (poll/select)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.For) and _is_range_call(node.iter):
            body = ast.Module(body=node.body, type_ignores=[])
            if _waiting_call_names(body):
                lines.append(node.lineno)
    return lines


def test_the_checker_finds_a_counted_poll_loop() -> None:
    bad = "for _ in range(3000):\n    if done():\n        break\n    poller.poll(10)\n"
    good = ("deadline = time.monotonic() + 30\nwhile time.monotonic() < deadline:\n"
            "    poller.poll(10)\nfor i in range(3):\n    submit(i)\n")
    assert counted_waits(bad) == [1]
    assert counted_waits(good) == []


@pytest.mark.parametrize("path", sorted(TESTS.rglob("*.py")), ids=lambda p: str(p.relative_to(TESTS)))
def test_no_test_waits_by_counting_loop_turns(path: Path) -> None:
    found = counted_waits(path.read_text())
    assert not found, (f"{path.relative_to(TESTS)} lines {found}: a counted loop around a wait; "
                       "use lmserde.events.wait_on_fd or a time.monotonic() deadline")
