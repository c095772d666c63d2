"""Declared serde options and the validation of config kwargs against them."""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lmserde.suggestions import did_you_mean

__all__ = [
    "SerdeOption",
    "validate_options",
    "max_workers_option",
    "close_timeout_option",
    "processor_options",
    "check_close_timeout",
    "coerce_int",
    "MAX_WORKERS_LIMIT",
    "DEFAULT_CLOSE_TIMEOUT_S",
    "MAX_CLOSE_TIMEOUT_S",
]

_MISSING: Any = object()
_log = logging.getLogger(__name__)


def coerce_int(value: Any, *, name: str) -> int:
    """``value`` if it is an ``int``; ``ValueError`` naming the option for anything else.

    Strict: a ``bool``, a float (even ``2.0``) and a string (even ``"2"``) are refused, so a
    config that says ``"1e3"`` or ``2.5`` for a count is an error, not a guess.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ValueError(
        f"option '{name}' must be an integer (int), got {_describe_value(value)}"
    )


def _coerce_float(value: Any, *, name: str) -> float:
    """``value`` as a ``float`` when it is an ``int`` or a ``float``; ``ValueError`` naming the
    option for anything else (a ``bool`` or a string such as ``"2.5"`` included)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise ValueError(
        f"option '{name}' must be a number (int or float), got {_describe_value(value)}"
    )


def _describe_value(value: Any) -> str:
    """``"str '2'"``: the type and the value, for an error message."""
    return f"{type(value).__name__} {value!r}"


def _coerce_bool(value: Any, *, name: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("true", "false", "yes", "no", "1", "0"):
        return value.strip().lower() in ("true", "yes", "1")
    raise ValueError(f"option '{name}' must be a boolean, got {value!r}")


def _coerce_str(value: Any, *, name: str) -> str:
    if isinstance(value, str):
        return value
    raise ValueError(f"option '{name}' must be a string, got {type(value).__name__} {value!r}")


_COERCERS: dict[type, Callable[..., Any]] = {
    int: coerce_int,
    float: _coerce_float,
    bool: _coerce_bool,
    str: _coerce_str,
}


@dataclass(frozen=True)
class SerdeOption:
    """One option a serde accepts in its config dict.

    ``type`` is ``int``, ``float``, ``bool``, ``str`` or ``object`` (passed through). Numbers are
    taken as the declared type only: an ``int`` option accepts an ``int`` (not ``2.0``, ``"2"``
    or ``True``), a ``float`` option an ``int`` or a ``float`` (not a string or a ``bool``);
    anything else is a ``ValueError`` naming the option, the value and the expected type. ``choices``
    restricts the value; ``check`` may raise ``ValueError`` for anything else that is invalid;
    ``minimum`` and ``maximum`` bound numbers (inclusive). A ``float`` option rejects NaN and
    +-infinity unless ``allow_nonfinite`` is set. ``required`` options have no default.

    ``identity`` says whether the option changes the bytes written: ``True`` (default) for
    options such as a dtype or a preset, ``False`` for options that do not (``max_workers``,
    thread counts, where a key file lives). Identity options make up
    :meth:`~lmserde.SerdeProcessor.get_config`, which stored objects record to tell what wrote
    them.

    ``deprecated_names`` are former names of the option still accepted in configs: the value is
    used under ``name`` and a warning is logged once per serde and old name; giving both names
    is an error.
    """

    name: str
    type: type
    default: Any = None
    help: str = ""
    choices: Sequence[Any] | None = None
    minimum: float | None = None
    required: bool = False
    check: Callable[[Any], None] | None = None
    maximum: float | None = None
    allow_nonfinite: bool = False
    identity: bool = True
    deprecated_names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.type not in _COERCERS and self.type is not object:
            raise TypeError(f"SerdeOption '{self.name}': unsupported type {self.type!r}")

    def coerce(self, value: Any) -> Any:
        """Convert and validate one value; raise ``ValueError`` naming the option."""
        if self.type is object:
            converted = value
        else:
            converted = _COERCERS[self.type](value, name=self.name)
        if self.choices is not None and converted not in self.choices:
            allowed = ", ".join(repr(c) for c in self.choices)
            raise ValueError(f"option '{self.name}' must be one of {allowed}; got {value!r}")
        if (self.type is float and not self.allow_nonfinite and isinstance(converted, float)
                and not math.isfinite(converted)):
            raise ValueError(f"option '{self.name}' must be a finite number, got {value!r}")
        if self.minimum is not None and not converted >= self.minimum:
            raise ValueError(f"option '{self.name}' must be >= {self.minimum:g}, got {value!r}")
        if self.maximum is not None and not converted <= self.maximum:
            raise ValueError(f"option '{self.name}' must be <= {self.maximum:g}, got {value!r}")
        if self.check is not None:
            self.check(converted)
        return converted

    def describe_type(self) -> str:
        if self.choices is not None:
            return " | ".join(str(c) for c in self.choices)
        return self.type.__name__


#: Upper bound of :func:`max_workers_option` (threads of one processor).
MAX_WORKERS_LIMIT = 256


def max_workers_option(default: int = 1) -> SerdeOption:
    """The standard ``max_workers`` option: worker threads of the async processor.

    Bounded to ``[1, MAX_WORKERS_LIMIT]``; not an identity option (threads do not change bytes).
    """
    return SerdeOption(
        "max_workers",
        int,
        default,
        "worker threads of the asynchronous processor (tasks run concurrently, items in order)",
        minimum=1,
        maximum=MAX_WORKERS_LIMIT,
        identity=False,
    )


#: Default of :func:`close_timeout_option`: the longest a processor's ``close()`` waits for its
#: running calls before it returns and reports them as hung.
DEFAULT_CLOSE_TIMEOUT_S = 10.0
#: Upper bound of ``close_timeout_s`` (one hour).
MAX_CLOSE_TIMEOUT_S = 3600.0


def close_timeout_option(default: float = DEFAULT_CLOSE_TIMEOUT_S) -> SerdeOption:
    """The standard ``close_timeout_s`` option: how long the processor's ``close()`` waits.

    ``close()`` waits up to this many seconds for queued and running calls, then returns even
    if a plugin call never returns: the call is logged as hung (naming the serde, the call and
    where its thread is) and reported by ``hung_calls()``; its daemon thread is left behind.
    Seconds in ``[0, MAX_CLOSE_TIMEOUT_S]``; not an identity option.
    """
    return SerdeOption(
        "close_timeout_s",
        float,
        float(default),
        "seconds close() waits for running calls before it returns and reports them as hung",
        minimum=0.0,
        maximum=MAX_CLOSE_TIMEOUT_S,
        identity=False,
    )


def processor_options(max_workers: int = 1,
                      close_timeout_s: float = DEFAULT_CLOSE_TIMEOUT_S) -> tuple[SerdeOption, ...]:
    """The options every serde run by core's processor declares, with these defaults:
    :func:`max_workers_option` and :func:`close_timeout_option` (in that order)."""
    return (max_workers_option(max_workers), close_timeout_option(close_timeout_s))


def check_close_timeout(value: Any, *, name: str = "close_timeout_s") -> float:
    """``value`` as the seconds of a close bound: a finite number in ``[0, MAX_CLOSE_TIMEOUT_S]``
    (``ValueError`` naming ``name`` otherwise)."""
    bound = SerdeOption(name, float, DEFAULT_CLOSE_TIMEOUT_S, minimum=0.0,
                        maximum=MAX_CLOSE_TIMEOUT_S)
    return float(bound.coerce(value))


def validate_options(
    serde_type: str, options: Sequence[SerdeOption], kwargs: Mapping[str, Any],
    *, kind: str = "serde",
) -> dict[str, Any]:
    """Return ``kwargs`` checked against ``options``, coerced, with defaults filled in.

    Unknown keys raise ``ValueError`` naming the key, the accepted keys and the closest match.
    ``kind`` names what is configured in messages (``"serde"``, ``"L2 adapter"``).
    """
    by_name = {o.name: o for o in options}
    kwargs = _rename_deprecated(serde_type, options, kwargs, kind)
    unknown = [k for k in kwargs if k not in by_name]
    if unknown:
        key = unknown[0]
        accepted = ", ".join(sorted(by_name)) or "(none)"
        hint = did_you_mean(str(key), by_name)
        raise ValueError(
            f"Unknown option '{key}' for {kind} '{serde_type}'. Accepted options: {accepted}.{hint}"
        )
    result: dict[str, Any] = {}
    for option in options:
        if option.name in kwargs:
            try:
                result[option.name] = option.coerce(kwargs[option.name])
            except ValueError as exc:
                raise ValueError(f"{kind} '{serde_type}': {exc}") from None
        elif option.required:
            raise ValueError(f"{kind} '{serde_type}' requires option '{option.name}' ({option.help})")
        else:
            result[option.name] = option.default
    return result


_warned_deprecated: set[tuple[str, str, str]] = set()
_warned_lock = threading.Lock()


def _rename_deprecated(
    serde_type: str, options: Sequence[SerdeOption], kwargs: Mapping[str, Any], kind: str,
) -> Mapping[str, Any]:
    """``kwargs`` with deprecated option names replaced by the current ones."""
    renames = {old: o.name for o in options for old in o.deprecated_names}
    if not any(k in renames for k in kwargs):
        return kwargs
    result = dict(kwargs)
    for old, new in renames.items():
        if old not in result:
            continue
        if new in result:
            raise ValueError(
                f"{kind} '{serde_type}': options '{old}' (deprecated) and '{new}' are the same "
                f"option; give only '{new}'"
            )
        result[new] = result.pop(old)
        with _warned_lock:
            first = (kind, serde_type, old) not in _warned_deprecated
            _warned_deprecated.add((kind, serde_type, old))
        if first:
            _log.warning("%s '%s': option '%s' is deprecated; use '%s'", kind, serde_type, old,
                         new)
    return result
