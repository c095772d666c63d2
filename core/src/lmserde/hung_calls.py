"""What a processor reports about a plugin call that did not return in time (``HungCall``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["HungCall", "serde_origin", "describe_key"]


@dataclass(frozen=True)
class HungCall:
    """A plugin call still running when :meth:`AsyncSerdeProcessor.close` stopped waiting.

    ``serde_type`` and ``origin`` (``"from distribution NAME VERSION"``, or how the serde was
    registered) name the plugin; ``call`` what it was doing (``"serialize of key ..."``);
    ``seconds`` how long it had run at that moment; ``where`` its thread's innermost frames;
    ``thread`` the thread's name (a daemon thread left behind; it ends when the call returns).
    """

    serde_type: str
    origin: str
    direction: str
    task_id: int
    call: str
    seconds: float
    where: str
    thread: str

    def describe(self) -> str:
        """One line for a log or a status page."""
        text = (f"serde {self.serde_type} ({self.origin}): {self.call} (task {self.task_id}) "
                f"still running after {self.seconds:.1f} s on thread {self.thread}")
        return text + (f", at {self.where}" if self.where else "")

    def as_dict(self) -> dict[str, Any]:
        return {"serde_type": self.serde_type, "origin": self.origin,
                "direction": self.direction, "task_id": self.task_id, "call": self.call,
                "seconds": round(self.seconds, 3), "where": self.where, "thread": self.thread}


def _unknown_origin(_name: str) -> str:
    return "of unknown origin"


#: Where a serde type comes from: set by :mod:`lmserde.registries` (above this module) to its
#: serde registry's ``origin``; until then every serde is "of unknown origin".
_origin_of: Callable[[str], str] = _unknown_origin


def set_origin_resolver(resolve: Callable[[str], str]) -> None:
    """Install how :func:`serde_origin` names where a serde type comes from (its distribution)."""
    global _origin_of
    _origin_of = resolve


def serde_origin(serde_type: str) -> str:
    """Where ``serde_type`` comes from, for messages (each stage of a chain ``a+b``)."""
    names = serde_type.split("+")
    try:
        return "; ".join(f"{n} {_origin_of(n)}" if len(names) > 1 else _origin_of(n)
                         for n in names)
    except Exception:  # never fail a shutdown report
        return "of unknown origin"


def describe_key(key: Any) -> str:
    """A key for a log line: its chunk hash in hex when it has one."""
    chunk_hash = getattr(key, "chunk_hash", None)
    if isinstance(chunk_hash, (bytes, bytearray)):
        return bytes(chunk_hash).hex()[:16]
    return repr(chunk_hash if chunk_hash is not None else key)[:40]


