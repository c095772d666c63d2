"""Containment of plugin code: what a ``BaseException`` raised by a plugin is allowed to do.

Plugin code (serializers, deserializers, factories, key providers, hook implementations, entry
point imports) is untrusted. Whatever it raises — ``Exception``, ``SystemExit``,
``asyncio.CancelledError``, ``GeneratorExit``, ``KeyboardInterrupt`` — fails the one item, task or
plugin it belongs to, is logged naming the plugin, and is never taken for success. The single
exception: a ``KeyboardInterrupt`` on the main thread is the user pressing Ctrl-C and keeps
propagating. On worker and poll threads everything is caught (a ``KeyboardInterrupt`` there is
not a user interrupt; letting it escape would only kill the thread).
"""

from __future__ import annotations

import threading

__all__ = ["must_propagate", "describe_exception"]


def must_propagate(exc: BaseException) -> bool:
    """``True`` only for a ``KeyboardInterrupt`` raised on the main thread.

    Callers catch ``BaseException`` around plugin code and re-raise when this is true; everything
    else is contained.
    """
    return (isinstance(exc, KeyboardInterrupt)
            and threading.current_thread() is threading.main_thread())


def describe_exception(exc: BaseException) -> str:
    """``"TypeName: message"`` (just the type name when the message is empty)."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
