"""``InFlight``: tasks waiting on another component's task ids (the split tier's task tables)."""

from __future__ import annotations

import threading

import pytest
from lmserde.l2.contract.in_flight import InFlight


def test_a_task_is_taken_once_when_its_component_task_has_a_result() -> None:
    table: InFlight[str] = InFlight()
    assert table.start("a", lambda: 1) is None
    assert table.start("b", lambda: 2) is None
    results = {1: "done-1"}
    assert table.finished(results.get) == [("a", "done-1")]
    assert table.finished(results.get) == []  # taken: never returned twice
    assert table.close() == ["b"]


def test_a_submit_that_raises_or_a_closed_table_registers_nothing() -> None:
    table: InFlight[str] = InFlight()

    def broken() -> int:
        raise OSError("adapter down")

    assert table.start("a", broken) == "OSError: adapter down"
    assert table.close() == []
    assert table.start("b", lambda: 7) == "closed"
    assert table.finished(lambda _: "x") == [] and table.close() == []


def test_finished_among_takes_only_this_tables_tasks() -> None:
    table: InFlight[str] = InFlight()
    table.start("a", lambda: 1)
    assert table.finished_among(lambda: {1: True, 99: False}) == [("a", True)]
    assert table.close() == []


def test_a_task_taken_by_close_during_a_drain_is_not_returned() -> None:
    table: InFlight[str] = InFlight()
    table.start("a", lambda: 1)
    taken: list[list[str]] = []

    def query(_: int) -> str:
        taken.append(table.close())  # close() runs while the drain holds the result
        return "late"

    assert table.finished(query) == []
    assert taken == [["a"]]


@pytest.mark.parametrize("drain", ["finished", "finished_among"])
def test_a_drain_waits_for_the_registration_of_a_task_being_submitted(drain: str) -> None:
    """A component may complete before its submit returns: the drain that its event wakes must
    still find the task (it waits for the registration, it does not miss it)."""
    table: InFlight[str] = InFlight()
    got: list[list[tuple[str, str]]] = []

    def run_drain() -> None:
        if drain == "finished":
            got.append(table.finished(lambda i: "r" if i == 5 else None))
        else:
            got.append(table.finished_among(lambda: {5: "r"}))

    def submit() -> int:
        drainer = threading.Thread(target=run_drain)
        drainer.start()
        drainer.join(0.2)  # the drain the completion woke, while the submit has not returned
        assert drainer.is_alive(), "the drain did not wait for the task's registration"
        threads.append(drainer)
        return 5

    threads: list[threading.Thread] = []
    assert table.start("a", submit) is None
    threads[0].join(10)
    assert got == [[("a", "r")]]
