"""``lmserde.lmcache`` without LMCache: the naming rule, idempotence, failure isolation, and the
processor bridge driven with LMCache-shaped keys, layouts and whole multi-group objects.

These run in the default suite; ``test_lmcache_*`` modules that need the real package run in the
``interop`` session.
"""

from __future__ import annotations

import enum
import importlib.util
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from lmserde import (
    MemoryLayoutDesc,
    SerdeConfig,
    TensorMemoryObj,
    create_serde_processor,
    get_registered_serde_types,
)
from lmserde.events import wait_on_fd
from lmserde.lmcache import (
    LMCacheProcessorBridge,
    as_lmserde_key,
    as_lmserde_layout,
    register_lmserde_serdes,
)
from lmserde.multi import GroupSlotView

SHAPE = [2, 4, 8, 16]


@dataclass(frozen=True)
class ForeignKey:  # the fields of LMCache's ObjectKey
    chunk_hash: bytes
    model_name: str
    kv_rank: int
    object_group_id: int = 0
    cache_salt: str = ""


@dataclass(frozen=True)
class ForeignLayout:  # the fields of LMCache's MemoryLayoutDesc
    shapes: list[torch.Size]
    dtypes: list[torch.dtype]


class FakeRegistry:
    """LMCache's registry surface: ``register_serde_factory`` and ``get_registered_serde_types``."""

    def __init__(self, builtin: tuple[str, ...] = ("fp8", "aesgcm", "turboquant")) -> None:
        self.factories: dict[str, Callable[[dict[str, Any]], Any]] = dict.fromkeys(builtin, dict)
        self.refuse: set[str] = set()

    def register_serde_factory(self, name: str, factory: Callable[[dict[str, Any]], Any]) -> None:
        if name in self.factories or name in self.refuse:
            raise ValueError(f"Serde type already registered: {name!r}")
        self.factories[name] = factory

    def get_registered_serde_types(self) -> list[str]:
        return list(self.factories)


class ContractEnum(enum.Enum):
    EXACT = "exact"
    UPPER_BOUND = "upper_bound"


class ContractRegistry(FakeRegistry):
    """A newer LMCache surface: factories are registered with a size contract."""

    SerdeSizeContract = ContractEnum

    def __init__(self) -> None:
        super().__init__()
        self.contracts: dict[str, ContractEnum] = {}

    def register_serde_factory(self, name: str, factory: Callable[[dict[str, Any]], Any],
                               *, size_contract: ContractEnum = ContractEnum.UPPER_BOUND) -> None:
        super().register_serde_factory(name, factory)
        self.contracts[name] = size_contract


def installed(*names: str) -> None:
    missing = [n for n in names if n not in get_registered_serde_types()]
    if missing:
        pytest.skip(f"serde plugin(s) {missing} not installed")


# -- registration ---------------------------------------------------------------------------------


def test_names_lmcache_has_get_the_prefix_others_keep_theirs() -> None:
    registry = FakeRegistry()
    report = register_lmserde_serdes(registry=registry)
    assert report.skipped == {}
    assert set(report.registered) == set(get_registered_serde_types())
    for ours, name in report.registered.items():
        expected = f"lmserde_{ours}" if ours in ("fp8", "aesgcm", "turboquant") else ours
        assert name == expected and name in registry.factories
    assert registry.factories["fp8"] is dict  # LMCache's own entries are untouched


def test_second_call_registers_nothing_new() -> None:
    registry = FakeRegistry()
    first = register_lmserde_serdes(registry=registry)
    before = dict(registry.factories)
    assert register_lmserde_serdes(registry=registry).registered == first.registered
    assert registry.factories == before


def test_custom_prefix_and_selected_names() -> None:
    installed("identity")
    registry = FakeRegistry(builtin=("identity",))
    report = register_lmserde_serdes(registry=registry, names=["identity"], prefix="x_")
    assert report.registered == {"identity": "x_identity"}
    assert report.lmcache_name("identity") == "x_identity"
    with pytest.raises(ValueError, match="not registered in LMCache"):
        report.lmcache_name("fp8")


def test_bad_arguments_are_value_errors() -> None:
    with pytest.raises(ValueError, match="unknown lmserde serde type"):
        register_lmserde_serdes(registry=FakeRegistry(), names=["no_such_serde"])
    with pytest.raises(ValueError, match="prefix"):
        register_lmserde_serdes(registry=FakeRegistry(), prefix="")


def test_a_refused_name_is_reported_and_the_others_still_register() -> None:
    installed("identity")
    registry = FakeRegistry()
    registry.refuse.add("identity")
    report = register_lmserde_serdes(registry=registry)
    assert "already registered" in report.skipped["identity"]
    assert set(report.registered) == set(get_registered_serde_types()) - {"identity"}


def test_both_names_taken_is_reported() -> None:
    installed("identity")
    report = register_lmserde_serdes(registry=FakeRegistry(builtin=("identity",
                                                                     "lmserde_identity")))
    assert "lmserde_identity" in report.skipped["identity"]


def test_size_contracts_are_declared_where_lmcache_takes_them() -> None:
    installed("identity", "asym_k16_v8")
    padded, unpadded = ContractRegistry(), ContractRegistry()
    register_lmserde_serdes(registry=padded, names=["identity", "asym_k16_v8"])
    register_lmserde_serdes(registry=unpadded, names=["identity", "asym_k16_v8"],
                            pad_upper_bound=False)
    assert padded.contracts == {"identity": ContractEnum.EXACT, "asym_k16_v8": ContractEnum.EXACT}
    assert unpadded.contracts["asym_k16_v8"] is ContractEnum.UPPER_BOUND


def test_registered_factories_validate_options_like_lmserde() -> None:
    installed("identity")
    registry = FakeRegistry()
    name = register_lmserde_serdes(registry=registry).lmcache_name("identity")
    processor = registry.factories[name]({"max_workers": 2})
    try:
        assert isinstance(processor, LMCacheProcessorBridge)
        assert processor.serde_type == "identity" and processor.pad_to_estimate is False
    finally:
        processor.close()
    with pytest.raises(ValueError, match="Unknown option 'max_worker'"):
        registry.factories[name]({"max_worker": 2})


def test_without_lmcache_registration_says_how_to_install_it() -> None:
    if importlib.util.find_spec("lmcache") is not None:
        pytest.skip("lmcache is installed here")
    with pytest.raises(ImportError, match="pip install lmcache"):
        register_lmserde_serdes()


def test_importing_the_bridge_does_not_import_lmcache() -> None:
    code = "import sys, lmserde.lmcache; assert 'lmcache' not in sys.modules, 'lmcache imported'"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr


# -- conversions ----------------------------------------------------------------------------------


def test_foreign_keys_and_layouts_convert_field_by_field() -> None:
    key = as_lmserde_key(ForeignKey(b"\x01\x02", "m", 7, 1, "t"))
    assert (key.chunk_hash, key.model_name, key.kv_rank, key.object_group_id, key.cache_salt) == (
        b"\x01\x02", "m", 7, 1, "t")
    layout = as_lmserde_layout(ForeignLayout([torch.Size(SHAPE)], [torch.float16]))
    assert layout == MemoryLayoutDesc([SHAPE], [torch.float16])
    with pytest.raises(ValueError, match="not an object key"):
        as_lmserde_key("chunk")
    with pytest.raises(ValueError, match="not a memory layout"):
        as_lmserde_layout(3)


# -- the bridge -----------------------------------------------------------------------------------


def _kv(groups: int, seed: int) -> TensorMemoryObj:
    gen = torch.Generator().manual_seed(seed)
    obj = TensorMemoryObj.allocate(MemoryLayoutDesc([SHAPE] * groups, [torch.bfloat16] * groups))
    for g in range(groups):
        obj.get_tensor(g).copy_(torch.randn(SHAPE, generator=gen).to(torch.bfloat16))
    return obj


def _run(bridge: LMCacheProcessorBridge, submit: Callable[[], int], query: Callable[[int], Any]
         ) -> Any:
    """Submit a task and wait (on time, on the bridge's own fd) for ``query`` to answer."""
    task = submit()
    serialize = query == bridge.query_serialize_result
    fd = bridge.get_serialize_event_fd() if serialize else bridge.get_deserialize_event_fd()
    try:
        return wait_on_fd(fd, lambda: query(task), timeout=60.0, what=f"bridge task {task}")
    except TimeoutError as exc:
        raise AssertionError(str(exc)) from None


def _bridge(serde_type: str, pad: bool) -> LMCacheProcessorBridge:
    return LMCacheProcessorBridge(create_serde_processor(SerdeConfig(serde_type)),
                                  serde_type=serde_type, pad_to_estimate=pad)


def test_multi_serde_gets_whole_objects_split_into_slots_and_pads_to_the_estimate() -> None:
    installed("asym_k16_v8")
    bridge = _bridge("asym_k16_v8", pad=True)
    try:
        layout = ForeignLayout([torch.Size(SHAPE)] * 2, [torch.bfloat16] * 2)
        estimate = bridge.estimate_serialized_size(layout)
        srcs = [_kv(2, seed) for seed in range(3)]
        temps = []
        for _ in srcs:
            temp = TensorMemoryObj.allocate(MemoryLayoutDesc([[estimate]], [torch.uint8]))
            temp.raw_data.fill_(0xEE)  # the padding must overwrite stale bytes
            temps.append(temp)
        keys = [ForeignKey(bytes([i]) * 8, "m", 0) for i in range(3)]
        assert _run(bridge, lambda: bridge.submit_serialize(srcs, temps, keys),
                    bridge.query_serialize_result) is True
        for temp in temps:
            assert temp.get_size() == estimate
            tail = temp.raw_data[213 + 3 * torch.Size(SHAPE).numel() + 4:]
            assert int(tail.count_nonzero()) == 0
        outs = [_kv(2, 100 + i) for i in range(3)]
        assert _run(bridge, lambda: bridge.submit_deserialize(temps, outs, keys),
                    bridge.query_deserialize_result) is True
        for out, src in zip(outs, srcs):
            assert torch.equal(out.get_tensor(0), src.get_tensor(0))
    finally:
        bridge.close()


def test_without_padding_the_used_size_is_the_blob_size() -> None:
    installed("asym_k16_v8")
    bridge = _bridge("asym_k16_v8", pad=False)
    try:
        layout = MemoryLayoutDesc([SHAPE] * 2, [torch.bfloat16] * 2)
        estimate = bridge.estimate_serialized_size(layout)
        temp = TensorMemoryObj.allocate(MemoryLayoutDesc([[estimate]], [torch.uint8]))
        key = ForeignKey(b"k" * 8, "m", 0)
        assert _run(bridge, lambda: bridge.submit_serialize([_kv(2, 1)], [temp], [key]),
                    bridge.query_serialize_result) is True
        assert temp.get_size() == 213 + 3 * torch.Size(SHAPE).numel() + 4 < estimate
    finally:
        bridge.close()


def test_single_serde_bridge_passes_objects_through() -> None:
    installed("identity")
    bridge = _bridge("identity", pad=True)
    try:
        assert bridge.input_slot_mapping() is None and bridge.serializer_group_size() is None
        src = _kv(1, 3)
        temp = TensorMemoryObj.allocate(MemoryLayoutDesc([[src.get_size()]], [torch.uint8]))
        key = ForeignKey(b"k" * 8, "m", 0)
        assert _run(bridge, lambda: bridge.submit_serialize([src], [temp], [key]),
                    bridge.query_serialize_result) is True
        out = _kv(1, 4)
        assert _run(bridge, lambda: bridge.submit_deserialize([temp], [out], [key]),
                    bridge.query_deserialize_result) is True
        assert torch.equal(out.tensor, src.tensor)
    finally:
        bridge.close()


def test_slot_mapping_beyond_the_objects_groups_fails_the_submit() -> None:
    installed("asym_k16_v8")
    bridge = _bridge("asym_k16_v8", pad=True)
    try:
        with pytest.raises(ValueError, match="references group 1"):
            bridge.submit_serialize([_kv(1, 0)], [_kv(1, 1)], [ForeignKey(b"k", "m", 0)])
    finally:
        bridge.close()


def test_tuples_from_newer_hosts_pass_through() -> None:
    installed("asym_k16_v8")
    bridge = _bridge("asym_k16_v8", pad=False)
    try:
        src = _kv(2, 5)
        layouts = (MemoryLayoutDesc([SHAPE], [torch.bfloat16]),) * 2
        estimate = bridge.estimate_serialized_size(layouts)
        temp = TensorMemoryObj.allocate(MemoryLayoutDesc([[estimate]], [torch.uint8]))
        slots = (GroupSlotView(src, 0), GroupSlotView(src, 1))
        assert _run(bridge, lambda: bridge.submit_serialize([slots], [temp], [ForeignKey(
            b"k", "m", 0)]), bridge.query_serialize_result) is True
    finally:
        bridge.close()
