"""Registering lmserde's serdes into LMCache's own serde registry.

Naming rule: LMCache's built-in serdes keep their names. An lmserde serde is registered under its
own name when LMCache has no serde of that name, and under ``<prefix><name>`` (``lmserde_fp8``)
when it has. Nothing LMCache registered is ever replaced. Calling the function again registers
only what is new (plugins installed since) and reports the rest as already registered.

The registered factory builds the lmserde processor through lmserde's registry, so options are
validated exactly as in lmserde, and the plugin is imported only when LMCache's configuration
names it: one broken plugin never affects registration of the others.
"""

from __future__ import annotations

import inspect
import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from lmserde.base import SerdeConfig, SerdeProcessor
from lmserde.lmcache.processor_bridge import LMCacheProcessorBridge
from lmserde.spec import SerdeSizeContract

__all__ = ["LMCacheRegistration", "register_lmserde_serdes", "lmcache_serde_registry",
           "DEFAULT_PREFIX"]

_log = logging.getLogger(__name__)

DEFAULT_PREFIX = "lmserde_"
_LMCACHE_SERDE_MODULE = "lmcache.v1.distributed.serde"
_lock = threading.Lock()


@dataclass(frozen=True)
class LMCacheRegistration:
    """What :func:`register_lmserde_serdes` did.

    ``registered`` maps each lmserde type to the name LMCache now knows it by (including ones a
    previous call registered); ``skipped`` maps types that could not be registered to the reason.
    """

    registered: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)

    def lmcache_name(self, lmserde_type: str) -> str:
        """The LMCache serde type to put in an adapter's ``"serde": {"type": ...}``."""
        try:
            return self.registered[lmserde_type]
        except KeyError:
            reason = self.skipped.get(lmserde_type, "it is not an installed lmserde serde")
            raise ValueError(f"lmserde serde '{lmserde_type}' is not registered in LMCache: "
                             f"{reason}") from None


def lmcache_serde_registry() -> Any:
    """LMCache's serde package (``register_serde_factory``, ``get_registered_serde_types``).

    Raises ``ImportError`` with an installation hint when LMCache is not importable.
    """
    import importlib

    try:
        return importlib.import_module(_LMCACHE_SERDE_MODULE)
    except ImportError as exc:
        raise ImportError(
            "lmserde.lmcache needs LMCache (pip install lmcache); importing "
            f"{_LMCACHE_SERDE_MODULE} failed: {exc}"
        ) from exc


class _BridgeFactory:
    """LMCache-style ``factory(kwargs) -> processor`` for one lmserde serde type."""

    def __init__(self, serde_type: str, pad_upper_bound: bool) -> None:
        self.serde_type = serde_type
        self.pad_upper_bound = pad_upper_bound
        self.__doc__ = f"lmserde serde '{serde_type}' (bridged by lmserde.lmcache)"

    def __call__(self, kwargs: dict[str, Any]) -> SerdeProcessor:
        from lmserde.serde_build import resolve_serde

        resolved = resolve_serde(SerdeConfig(self.serde_type, dict(kwargs or {})))
        processor, contract = resolved.build_processor(), resolved.size_contract
        pad = self.pad_upper_bound and contract is SerdeSizeContract.UPPER_BOUND
        return LMCacheProcessorBridge(processor, serde_type=self.serde_type, size_contract=contract,
                                      pad_to_estimate=pad)


def _accepts_size_contract(register: Any) -> bool:
    try:
        return "size_contract" in inspect.signature(register).parameters
    except (TypeError, ValueError):
        return False


def _their_contract(registry: Any, serde_type: str, pad_upper_bound: bool) -> Any:
    """LMCache's size-contract value for ``serde_type`` (newer LMCache releases take one)."""
    from lmserde.registry import get_serde_size_contract

    enum = getattr(registry, "SerdeSizeContract", None)
    if enum is None:
        return None
    ours = SerdeSizeContract.EXACT if pad_upper_bound else get_serde_size_contract(serde_type)
    return getattr(enum, ours.name)


def register_lmserde_serdes(
    *,
    prefix: str = DEFAULT_PREFIX,
    names: Iterable[str] | None = None,
    pad_upper_bound: bool = True,
    registry: Any = None,
) -> LMCacheRegistration:
    """Register every installed lmserde serde (or only ``names``) into LMCache's serde registry.

    See the module documentation for the naming rule. ``pad_upper_bound`` pads upper-bound serdes
    (``asym_k16_v8``) to their estimate inside LMCache (see :class:`LMCacheProcessorBridge`):
    needed on LMCache releases whose wrapper does not narrow load buffers (0.5.6), harmless on
    newer ones except for the padding bytes. ``registry`` is LMCache's serde package by default;
    any object with ``register_serde_factory(name, factory)`` and
    ``get_registered_serde_types()`` works.
    """
    from lmserde.registry import get_registered_serde_types

    if not isinstance(prefix, str) or not prefix:
        raise ValueError(f"prefix must be a non-empty string, got {prefix!r}")
    target = registry if registry is not None else lmcache_serde_registry()
    wanted = list(get_registered_serde_types())
    if names is not None:
        requested = list(names)
        unknown = [n for n in requested if n not in wanted]
        if unknown:
            raise ValueError(f"unknown lmserde serde type(s) {unknown}; installed: "
                             f"{', '.join(sorted(wanted)) or '(none)'}")
        wanted = requested
    registered: dict[str, str] = {}
    skipped: dict[str, str] = {}
    with _lock:
        existing = set(target.get_registered_serde_types())
        ours = getattr(target, "_lmserde_bridged", None)
        if ours is None:
            ours = {}
            try:
                target._lmserde_bridged = ours
            except AttributeError:
                pass
        takes_contract = _accepts_size_contract(target.register_serde_factory)
        for serde_type in wanted:
            if ours.get(serde_type) is not None:
                registered[serde_type] = ours[serde_type]
                continue
            name = serde_type if serde_type not in existing else prefix + serde_type
            if name in existing:
                skipped[serde_type] = f"LMCache already has serde types '{serde_type}' and '{name}'"
                continue
            factory = _BridgeFactory(serde_type, pad_upper_bound)
            try:
                if takes_contract:
                    contract = _their_contract(target, serde_type, pad_upper_bound)
                    if contract is not None:
                        target.register_serde_factory(name, factory, size_contract=contract)
                    else:
                        target.register_serde_factory(name, factory)
                else:
                    target.register_serde_factory(name, factory)
            except Exception as exc:  # a broken plugin or a refused name: report, go on
                skipped[serde_type] = f"{type(exc).__name__}: {exc}"
                _log.warning("lmserde serde '%s' was not registered in LMCache: %s",
                             serde_type, exc)
                continue
            existing.add(name)
            ours[serde_type] = name
            registered[serde_type] = name
    return LMCacheRegistration(registered, skipped)
