"""The L2 tier: adapter contract, built-in adapters, the serde wrapper and adapter specs.

``create_l2_adapter({"type": "fs", "base_path": "/data/kv", "serde": {"type": "fp8"}}, l1)``
builds an adapter by name (types are discovered from the ``lmcache.l2_adapter`` entry-point group)
and wraps it in a :class:`SerdeL2AdapterWrapper` when a ``serde`` (or a list of serdes, a chain)
is given, or in a :class:`SplitTierL2Adapter` for a split-tier serde (``asym_k16_v8_v_only``: K
stays in L1, V goes to L2).
"""

from lmserde.l2.adapters.fault import FaultInjectingL2Adapter, FaultPlan, InjectedFaultError
from lmserde.l2.adapters.fs import FSL2Adapter, key_file_name
from lmserde.l2.adapters.memory import MemoryL2Adapter
from lmserde.l2.build import (
    L2AdapterConfig,
    create_l2_adapter,
    create_serde_for_config,
    parse_l2_adapter_spec,
    parse_serde_config,
)
from lmserde.l2.contract.bitmap import Bitmap
from lmserde.l2.contract.head_last import DeferredHead, HeadLastAdapter, adapter_writes_head_last
from lmserde.l2.contract.interface import L2AdapterInterface, L2Listener, L2TaskId
from lmserde.l2.contract.key_pins import KeyPins
from lmserde.l2.contract.replacing_store import ReplacingStoreAdapter, enable_replacing_stores
from lmserde.l2.contract.store_result import L2StoreResult
from lmserde.l2.contract.sync_driver import (
    load_sync,
    lookup_sync,
    store_sync,
    wait_for_load,
    wait_for_lookup,
    wait_for_store,
)
from lmserde.l2.contract.task_deadline import (
    DEFAULT_TASK_DEADLINE_S,
    BusyWorkers,
    TaskDeadlines,
    TaskGate,
    check_task_deadline,
)
from lmserde.l2.contract.task_queues import AdapterTaskQueues, QueuedResults
from lmserde.l2.contract.usage import AdapterUsage
from lmserde.l2.discovery.registry import (
    L2_ADAPTER_GROUP,
    L2AdapterInfo,
    get_l2_adapter_spec,
    get_registered_l2_adapter_types,
    list_l2_adapters,
    register_l2_adapter_type,
    rescan_l2_adapter_plugins,
    unregister_l2_adapter_type,
)
from lmserde.l2.discovery.spec import L2AdapterFactory, L2AdapterSpec
from lmserde.l2.serde.metrics import LatencySummary, WrapperMetrics
from lmserde.l2.serde.scrub import ScrubReport, scrub_adapter
from lmserde.l2.serde.stored_frame import FRAME_HEADER_BYTES, REJECT_REASONS, FrameRejected, ObjectFramer
from lmserde.l2.serde.wrapper import L1_WRITE_TAG, SerdeL2AdapterWrapper
from lmserde.l2.split.adapter import SplitTierL2Adapter, create_split_tier_adapter
from lmserde.l2.split.generation import (
    GENERATION_BYTES,
    GenerationSource,
    derive_v_child_key,
    parse_v_child_key,
)
from lmserde.l2.split.k_pool import SPLIT_TIER_K_TAG
from lmserde.l2.split.manifest import SplitTierManifest, SplitTierState
from lmserde.l2.split.placement import (
    SplitTierConfigError,
    StoragePlacementMode,
    check_split_tier_specs,
    derive_component_key,
    derive_storage_placement_mode,
    parse_component_key,
)
from lmserde.serde_chain import ChainStage, SerdeChainProcessor, create_serde_chain

__all__ = [
    "DEFAULT_TASK_DEADLINE_S",
    "BusyWorkers",
    "TaskDeadlines",
    "TaskGate",
    "check_task_deadline",
    "FRAME_HEADER_BYTES",
    "L1_WRITE_TAG",
    "L2_ADAPTER_GROUP",
    "AdapterTaskQueues",
    "AdapterUsage",
    "Bitmap",
    "ChainStage",
    "DeferredHead",
    "FSL2Adapter",
    "FaultInjectingL2Adapter",
    "FaultPlan",
    "FrameRejected",
    "HeadLastAdapter",
    "InjectedFaultError",
    "KeyPins",
    "ReplacingStoreAdapter",
    "enable_replacing_stores",
    "L2AdapterConfig",
    "L2AdapterFactory",
    "L2AdapterInfo",
    "L2AdapterInterface",
    "L2AdapterSpec",
    "L2Listener",
    "L2StoreResult",
    "L2TaskId",
    "LatencySummary",
    "MemoryL2Adapter",
    "ObjectFramer",
    "QueuedResults",
    "REJECT_REASONS",
    "ScrubReport",
    "SerdeChainProcessor",
    "SerdeL2AdapterWrapper",
    "SPLIT_TIER_K_TAG",
    "SplitTierConfigError",
    "SplitTierL2Adapter",
    "SplitTierManifest",
    "SplitTierState",
    "StoragePlacementMode",
    "WrapperMetrics",
    "adapter_writes_head_last",
    "check_split_tier_specs",
    "create_l2_adapter",
    "create_split_tier_adapter",
    "GENERATION_BYTES",
    "GenerationSource",
    "derive_v_child_key",
    "parse_v_child_key",
    "create_serde_chain",
    "create_serde_for_config",
    "get_l2_adapter_spec",
    "get_registered_l2_adapter_types",
    "derive_component_key",
    "derive_storage_placement_mode",
    "key_file_name",
    "list_l2_adapters",
    "load_sync",
    "lookup_sync",
    "parse_component_key",
    "parse_l2_adapter_spec",
    "parse_serde_config",
    "register_l2_adapter_type",
    "rescan_l2_adapter_plugins",
    "scrub_adapter",
    "store_sync",
    "unregister_l2_adapter_type",
    "wait_for_load",
    "wait_for_lookup",
    "wait_for_store",
]
