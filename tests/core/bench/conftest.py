"""Fixtures of the bench tests: programmatic test serdes and a CLI runner."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from bench_test_serdes import SPECS
from lmserde.cli.main import main
from lmserde.registry import register_serde_factory, unregister_serde_factory


@pytest.fixture
def test_serdes() -> Iterator[Callable[..., None]]:
    """``register(*names)`` registers test serdes from ``bench_test_serdes.SPECS`` for one test."""
    registered: list[str] = []

    def register(*names: str) -> None:
        for name in names:
            register_serde_factory(name, SPECS[name])
            registered.append(name)

    yield register
    for name in registered:
        unregister_serde_factory(name)


#: Arguments that keep an end-to-end run small and fast.
SMALL = ["--chunks", "2", "--repeat", "1"]


@pytest.fixture
def bench(capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str, str]]:
    """``bench(*args, model="tiny")`` runs ``lmserde bench --model MODEL --chunks 2 --repeat 1
    *args`` in-process (no ``--model`` when ``model`` is ``None``): ``(exit code, stdout, stderr)``."""

    def run(*args: str, model: str | None = "tiny") -> tuple[int, str, str]:
        prefix = (["--model", model] if model else []) + SMALL
        try:
            code = main(["bench", *prefix, *args])
        except SystemExit as exc:  # argparse errors
            code = int(exc.code or 0)
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.fixture
def bench_json(bench: Callable[..., tuple[int, str, str]]) -> Callable[..., dict[str, Any]]:
    """``bench_json(*args)``: a tiny ``--json`` run that must succeed; returns the parsed report."""

    def run(*args: str) -> dict[str, Any]:
        code, out, err = bench("--json", *args)
        assert code == 0, err
        return json.loads(out)

    return run
