"""``L2AdapterSpec``: what an adapter type publishes under the ``lmcache.l2_adapter`` group."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lmserde.options import SerdeOption, validate_options

if TYPE_CHECKING:
    from lmserde.l1.manager import L1Manager
    from lmserde.l2.contract.interface import L2AdapterInterface

__all__ = ["L2AdapterSpec", "L2AdapterFactory"]

L2AdapterFactory = Callable[[dict[str, Any], "L1Manager | None"], "L2AdapterInterface"]


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
        from lmserde.plugin_registry import spec_from_entry_object

        return spec_from_entry_object(cls, obj, "an L2 adapter")
