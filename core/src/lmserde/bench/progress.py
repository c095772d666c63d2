"""Progress reporting of a bench run: silent, or rich progress bars on a terminal."""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["Progress", "NullProgress", "RichProgress"]


class Progress(Protocol):
    """Receives the runner's progress: one phase at a time (the interleaved codec timing of
    every serde, then one per serde, then the frame and bandwidth measurements), steps within it."""

    def begin(self, label: str, total: int) -> None:
        """A new phase of ``total`` steps starts."""

    def advance(self, steps: int = 1) -> None:
        """``steps`` more steps of the current phase are done."""

    def end(self) -> None:
        """The current phase is done."""


class NullProgress:
    """Reports nothing."""

    def begin(self, label: str, total: int) -> None:
        pass

    def advance(self, steps: int = 1) -> None:
        pass

    def end(self) -> None:
        pass


class RichProgress:
    """One rich progress bar per phase, on ``console`` (stderr by default); use as a context manager.

    Needs the ``rich`` package (``pip install 'lmserde[bench]'``).
    """

    def __init__(self, console: Any = None) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as _RichProgress

        self._progress = _RichProgress(
            TextColumn("{task.description:<28}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), console=console or Console(stderr=True), transient=False,
        )
        self._task: Any = None

    def __enter__(self) -> RichProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def begin(self, label: str, total: int) -> None:
        self._task = self._progress.add_task(label, total=max(total, 1))

    def advance(self, steps: int = 1) -> None:
        if self._task is not None:
            self._progress.advance(self._task, steps)

    def end(self) -> None:
        if self._task is not None:
            total = next(t.total for t in self._progress.tasks if t.id == self._task)
            self._progress.update(self._task, completed=total)
            self._task = None
