"""The public API of ``lmserde``: the one table of its lazily loaded exports.

``__init__.py`` hands this stub to ``lazy_loader.attach_stub``: at run time each name below is
imported from its module on first access (so ``import lmserde`` stays cheap and does not import
torch); type checkers read the same file (``X as X`` marks a re-export). Add a public name here
and nowhere else.
"""

from ._version import __version__ as __version__
from .base import Deserializer as Deserializer
from .base import SerdeConfig as SerdeConfig
from .base import SerdeProcessor as SerdeProcessor
from .base import SerdeTaskId as SerdeTaskId
from .base import Serializer as Serializer
from .compat import API_VERSION as API_VERSION
from .completion_queue import CompletionQueue as CompletionQueue
from .data_kind import DataKind as DataKind
from .events import create_event_notifier as create_event_notifier
from .foreign_object import ForeignObjectError as ForeignObjectError
from .foreign_object import UnkeyedObjectError as UnkeyedObjectError
from .frame_checksum import PayloadHasher as PayloadHasher
from .frame_checksum import checksum_kernel as checksum_kernel
from .frame_checksum import copy_with_checksum as copy_with_checksum
from .frame_checksum import hasher_c_api as hasher_c_api
from .frame_checksum import payload_hasher as payload_hasher
from .hooks import HookImplResult as HookImplResult
from .hooks import call_hookimpls as call_hookimpls
from .hooks import get_plugin_manager as get_plugin_manager
from .hooks import hookimpl as hookimpl
from .hooks import hookspec as hookspec
from .keys import ObjectKey as ObjectKey
from .keys import make_temp_key as make_temp_key
from .layout import MemoryLayoutDesc as MemoryLayoutDesc
from .layout import serialized_layout_desc as serialized_layout_desc
from .memory import MemoryFormat as MemoryFormat
from .memory import MemoryObj as MemoryObj
from .memory import TensorMemoryObj as TensorMemoryObj
from .memory import as_byte_tensor as as_byte_tensor
from .multi import GroupSlotView as GroupSlotView
from .multi import LayoutDescGroup as LayoutDescGroup
from .multi import MemoryObjGroup as MemoryObjGroup
from .multi import MultiDeserializer as MultiDeserializer
from .multi import MultiSerializer as MultiSerializer
from .multi import layout_desc_to_group as layout_desc_to_group
from .multi import single_to_multi_deserializer as single_to_multi_deserializer
from .multi import single_to_multi_serializer as single_to_multi_serializer
from .multi import validate_group_size as validate_group_size
from .native_extension import NativeExtension as NativeExtension
from .observability import PolicyChangeEvent as PolicyChangeEvent
from .observability import SerdeTaskEvent as SerdeTaskEvent
from .observability import WrapperTaskEvent as WrapperTaskEvent
from .options import SerdeOption as SerdeOption
from .options import close_timeout_option as close_timeout_option
from .options import max_workers_option as max_workers_option
from .options import processor_options as processor_options
from .plugin_discovery import PluginLoadError as PluginLoadError
from .processor import AsyncSerdeProcessor as AsyncSerdeProcessor
from .processor import HungCall as HungCall
from .processor import TaskOutcome as TaskOutcome
from .registry import create_serde_processor as create_serde_processor
from .registry import get_registered_serde_types as get_registered_serde_types
from .registry import get_serde_size_contract as get_serde_size_contract
from .registry import get_serde_spec as get_serde_spec
from .registry import register_serde_factory as register_serde_factory
from .spec import SerdePair as SerdePair
from .spec import SerdeSizeContract as SerdeSizeContract
from .spec import SerdeSpec as SerdeSpec
from .spec import StoragePlacementMode as StoragePlacementMode
