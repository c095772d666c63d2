"""The public API of ``lmserde.l2``: the one table of its lazily loaded exports.

``__init__.py`` hands this stub to ``lazy_loader.attach_stub`` (as ``lmserde`` and every
package of it does); type checkers read the same file. Add a public name here and nowhere
else.
"""

from .adapters.fault import FaultInjectingL2Adapter as FaultInjectingL2Adapter
from .adapters.fault import FaultPlan as FaultPlan
from .adapters.fault import InjectedFaultError as InjectedFaultError
from .adapters.fs import FSL2Adapter as FSL2Adapter
from .adapters.fs import key_file_name as key_file_name
from .adapters.memory import MemoryL2Adapter as MemoryL2Adapter
from .build import L2AdapterConfig as L2AdapterConfig
from .build import create_l2_adapter as create_l2_adapter
from .build import create_serde_for_config as create_serde_for_config
from .build import parse_l2_adapter_spec as parse_l2_adapter_spec
from .build import parse_serde_config as parse_serde_config
from .contract.bitmap import Bitmap as Bitmap
from .contract.head_last import DeferredHead as DeferredHead
from .contract.head_last import HeadLastAdapter as HeadLastAdapter
from .contract.head_last import adapter_writes_head_last as adapter_writes_head_last
from .contract.interface import L2AdapterInterface as L2AdapterInterface
from .contract.interface import L2Listener as L2Listener
from .contract.interface import L2TaskId as L2TaskId
from .contract.key_pins import KeyPins as KeyPins
from .contract.replacing_store import ReplacingStoreAdapter as ReplacingStoreAdapter
from .contract.replacing_store import enable_replacing_stores as enable_replacing_stores
from .contract.store_result import L2StoreResult as L2StoreResult
from .contract.sync_driver import load_sync as load_sync
from .contract.sync_driver import lookup_sync as lookup_sync
from .contract.sync_driver import store_sync as store_sync
from .contract.sync_driver import wait_for_load as wait_for_load
from .contract.sync_driver import wait_for_lookup as wait_for_lookup
from .contract.sync_driver import wait_for_store as wait_for_store
from .contract.task_queues import AdapterTaskQueues as AdapterTaskQueues
from .contract.task_queues import QueuedResults as QueuedResults
from .contract.usage import AdapterUsage as AdapterUsage
from .discovery.registry import L2_ADAPTER_GROUP as L2_ADAPTER_GROUP
from .discovery.registry import L2AdapterInfo as L2AdapterInfo
from .discovery.registry import get_l2_adapter_spec as get_l2_adapter_spec
from .discovery.registry import get_registered_l2_adapter_types as get_registered_l2_adapter_types
from .discovery.registry import list_l2_adapters as list_l2_adapters
from .discovery.registry import register_l2_adapter_type as register_l2_adapter_type
from .discovery.registry import rescan_l2_adapter_plugins as rescan_l2_adapter_plugins
from .discovery.registry import unregister_l2_adapter_type as unregister_l2_adapter_type
from .discovery.spec import L2AdapterFactory as L2AdapterFactory
from .discovery.spec import L2AdapterSpec as L2AdapterSpec
from .serde.chains import ChainStage as ChainStage
from .serde.chains import SerdeChainProcessor as SerdeChainProcessor
from .serde.chains import create_serde_chain as create_serde_chain
from .serde.metrics import LatencySummary as LatencySummary
from .serde.metrics import WrapperMetrics as WrapperMetrics
from .serde.scrub import ScrubReport as ScrubReport
from .serde.scrub import scrub_adapter as scrub_adapter
from .serde.stored_frame import FRAME_HEADER_BYTES as FRAME_HEADER_BYTES
from .serde.stored_frame import REJECT_REASONS as REJECT_REASONS
from .serde.stored_frame import FrameRejected as FrameRejected
from .serde.stored_frame import ObjectFramer as ObjectFramer
from .serde.wrapper import L1_WRITE_TAG as L1_WRITE_TAG
from .serde.wrapper import SerdeL2AdapterWrapper as SerdeL2AdapterWrapper
from .split.adapter import SplitTierL2Adapter as SplitTierL2Adapter
from .split.adapter import create_split_tier_adapter as create_split_tier_adapter
from .split.k_pool import SPLIT_TIER_K_TAG as SPLIT_TIER_K_TAG
from .split.manifest import SplitTierManifest as SplitTierManifest
from .split.manifest import SplitTierState as SplitTierState
from .split.placement import SplitTierConfigError as SplitTierConfigError
from .split.placement import StoragePlacementMode as StoragePlacementMode
from .split.placement import check_split_tier_specs as check_split_tier_specs
from .split.placement import derive_component_key as derive_component_key
from .split.placement import derive_storage_placement_mode as derive_storage_placement_mode
from .split.placement import parse_component_key as parse_component_key
