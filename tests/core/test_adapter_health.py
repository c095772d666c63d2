"""AdapterHealth: failure counting and once-per-transition logging of a network adapter."""

from __future__ import annotations

import logging

import pytest
from lmserde.l2 import AdapterHealth

_LOGGER = "lmserde.tests.adapter_health"


def _health() -> AdapterHealth:
    return AdapterHealth("svc", "host:1", logger=logging.getLogger(_LOGGER), unit="request")


def test_a_new_tracker_is_healthy_with_no_error() -> None:
    assert _health().healthy
    assert _health().snapshot() == {"consecutive_failures": 0, "total_failures": 0,
                                    "last_error": None, "last_error_at": None}


def test_failures_count_until_a_success_resets_the_run() -> None:
    health = _health()
    health.failure("store", OSError("refused"))
    health.failure("load", TimeoutError("slow"))
    assert not health.healthy
    snap = health.snapshot()
    assert snap["consecutive_failures"] == 2 and snap["total_failures"] == 2
    assert snap["last_error"] == "load: TimeoutError: slow"
    assert isinstance(snap["last_error_at"], float)
    health.success()
    assert health.healthy
    snap = health.snapshot()
    assert snap["consecutive_failures"] == 0 and snap["total_failures"] == 2
    assert snap["last_error"] == "load: TimeoutError: slow"  # kept for diagnosis


def test_an_outage_warns_once_and_its_end_is_logged_once(caplog: pytest.LogCaptureFixture
                                                         ) -> None:
    caplog.set_level(logging.DEBUG, logger=_LOGGER)
    health = _health()
    health.success()  # healthy to healthy: nothing to say
    for _ in range(3):
        health.failure("store", OSError("refused"))
    health.success()
    health.success()
    levels = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == _LOGGER]
    assert [lv for lv, _ in levels] == [logging.WARNING, logging.DEBUG, logging.DEBUG,
                                        logging.INFO]
    assert "svc host:1: store failed (OSError: refused)" in levels[0][1]
    assert levels[3][1] == "svc host:1 is reachable again after 3 failed request(s)"
