"""lmserde: pluggable KV-cache byte transforms (serdes) for LLM serving.

The public API is re-exported here lazily, so that ``import lmserde`` (and ``lmserde plugins``)
does not import torch. Plugins use only these names and the public submodules
``lmserde.testing``, ``lmserde.l1``, ``lmserde.l2`` and ``lmserde.bench``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from lmserde._version import __version__

_EXPORTS: dict[str, str] = {
    # the plugin-facing API version plugins declare a range of (Requires-Dist: lmserde>=X,<Y)
    "API_VERSION": "lmserde.compat",
    # contracts
    "Serializer": "lmserde.base",
    "Deserializer": "lmserde.base",
    "SerdeProcessor": "lmserde.base",
    "SerdeConfig": "lmserde.base",
    "SerdeTaskId": "lmserde.base",
    "AsyncSerdeProcessor": "lmserde.processor",
    "TaskOutcome": "lmserde.processor",
    # registry and specs
    "SerdeSizeContract": "lmserde.spec",
    "SerdeSpec": "lmserde.spec",
    "SerdePair": "lmserde.spec",
    "DataKind": "lmserde.data_kind",
    "SerdeOption": "lmserde.options",
    "max_workers_option": "lmserde.options",
    "register_serde_factory": "lmserde.registry",
    "create_serde_processor": "lmserde.registry",
    "get_registered_serde_types": "lmserde.registry",
    "get_serde_size_contract": "lmserde.registry",
    "get_serde_spec": "lmserde.registry",
    "PluginLoadError": "lmserde.plugin_discovery",
    # multi-output
    "MultiSerializer": "lmserde.multi",
    "MultiDeserializer": "lmserde.multi",
    "MemoryObjGroup": "lmserde.multi",
    "LayoutDescGroup": "lmserde.multi",
    "single_to_multi_serializer": "lmserde.multi",
    "single_to_multi_deserializer": "lmserde.multi",
    "validate_group_size": "lmserde.multi",
    "layout_desc_to_group": "lmserde.multi",
    "GroupSlotView": "lmserde.multi",
    # memory, keys, layouts
    "ObjectKey": "lmserde.keys",
    "make_temp_key": "lmserde.keys",
    "MemoryLayoutDesc": "lmserde.layout",
    "serialized_layout_desc": "lmserde.layout",
    "MemoryObj": "lmserde.memory",
    "TensorMemoryObj": "lmserde.memory",
    "MemoryFormat": "lmserde.memory",
    "as_byte_tensor": "lmserde.memory",
    # events and hooks
    "create_event_notifier": "lmserde.events",
    "CompletionQueue": "lmserde.completion_queue",
    "get_plugin_manager": "lmserde.hooks",
    "hookimpl": "lmserde.hooks",
    "hookspec": "lmserde.hooks",
    "call_hookimpls": "lmserde.hooks",
    "HookImplResult": "lmserde.hooks",
    "SerdeTaskEvent": "lmserde.observability",
    "WrapperTaskEvent": "lmserde.observability",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'lmserde' has no attribute '{name}'")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


if TYPE_CHECKING:  # static view of the lazy exports
    from lmserde.base import Deserializer, SerdeConfig, SerdeProcessor, SerdeTaskId, Serializer
    from lmserde.compat import API_VERSION
    from lmserde.completion_queue import CompletionQueue
    from lmserde.data_kind import DataKind
    from lmserde.events import create_event_notifier
    from lmserde.hooks import (
        HookImplResult,
        call_hookimpls,
        get_plugin_manager,
        hookimpl,
        hookspec,
    )
    from lmserde.keys import ObjectKey, make_temp_key
    from lmserde.layout import MemoryLayoutDesc, serialized_layout_desc
    from lmserde.memory import MemoryFormat, MemoryObj, TensorMemoryObj, as_byte_tensor
    from lmserde.multi import (
        GroupSlotView,
        LayoutDescGroup,
        MemoryObjGroup,
        MultiDeserializer,
        MultiSerializer,
        layout_desc_to_group,
        single_to_multi_deserializer,
        single_to_multi_serializer,
        validate_group_size,
    )
    from lmserde.observability import SerdeTaskEvent, WrapperTaskEvent
    from lmserde.options import SerdeOption, max_workers_option
    from lmserde.plugin_discovery import PluginLoadError
    from lmserde.processor import AsyncSerdeProcessor, TaskOutcome
    from lmserde.registry import (
        create_serde_processor,
        get_registered_serde_types,
        get_serde_size_contract,
        get_serde_spec,
        register_serde_factory,
    )
    from lmserde.spec import SerdePair, SerdeSizeContract, SerdeSpec
