"""``L2AdapterSpec``: what an L2 adapter type publishes under the ``lmcache.l2_adapter`` group.

It sits beside :mod:`lmserde.spec` (a serde's spec), below :mod:`lmserde.registries`, which
coerces what an entry point names into it: so the registry instances import nothing from the
``lmserde.l2`` package (listing plugins imports neither it nor torch, and no import runs from
``registries`` up into ``l2`` and back). ``lmserde.l2`` re-exports it
(:mod:`lmserde.l2.discovery.spec`, with the factory type spelled out).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lmserde.options import SerdeOption, validate_options
from lmserde.plugin_registry import spec_from_entry_object

__all__ = ["L2AdapterSpec", "L2AdapterFactory"]

#: ``factory(options, l1_manager)``: ``l1_manager`` is an :class:`~lmserde.l1.L1Manager` or
#: ``None``; it returns an :class:`~lmserde.l2.L2AdapterInterface`. Spelled with ``Any`` here
#: (this module is below ``l1`` and ``l2``); :data:`lmserde.l2.L2AdapterFactory` names the types.
L2AdapterFactory = Callable[[dict[str, Any], Any], Any]


@dataclass(frozen=True)
class L2AdapterSpec:
    """An L2 adapter type.

    ``factory(options, l1_manager)`` builds the adapter from the spec dict's options (every key but
    ``type`` and ``serde``). With declared ``options`` they are validated and coerced first (unknown
    keys are errors naming the accepted ones) and the factory receives every declared option with
    defaults filled in; with ``options=None`` it receives them untouched.
    ``reports_object_sizes`` says whether the adapter reports stored sizes (``None``: it depends
    on the configuration, e.g. on a wrapped adapter).
    """

    factory: L2AdapterFactory
    description: str = ""
    options: Sequence[SerdeOption] | None = ()
    reports_object_sizes: bool | None = None

    def validate(self, adapter_type: str, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The options the factory will receive, or ``ValueError`` for invalid ones."""
        if self.options is None:
            return dict(kwargs)
        return validate_options(adapter_type, self.options, kwargs, kind="L2 adapter")

    @classmethod
    def from_entry_object(cls, obj: Any) -> L2AdapterSpec:
        """Accept an ``L2AdapterSpec`` or a plain ``factory(options, l1_manager)`` callable."""
        return spec_from_entry_object(cls, obj, "an L2 adapter")
