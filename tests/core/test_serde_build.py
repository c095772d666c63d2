"""One way to build a serde: parse once, look up once, pairs from the spec, chains from pairs."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from lmserde import (
    AsyncSerdeProcessor,
    MemoryLayoutDesc,
    ObjectKey,
    PluginLoadError,
    SerdePair,
    SerdeProcessor,
    SerdeSizeContract,
    SerdeSpec,
    TensorMemoryObj,
    create_serde_processor,
    max_workers_option,
    processor,
)
from lmserde.identity import IdentityDeserializer, IdentitySerializer
from lmserde.l1 import L1Manager
from lmserde.l2 import create_l2_adapter, create_serde_chain
from lmserde.registries import SERDES
from lmserde.registry import register_serde_factory, unregister_serde_factory
from lmserde.serde_build import as_serde_config, resolve_serde
from lmserde.testing import random_object, wait_for_result

LAYOUT = MemoryLayoutDesc([[4, 16]], [torch.float16])
KEY = ObjectKey(b"build", "m", 0)


class _Calls:
    def __init__(self) -> None:
        self.pairs: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def pair(self, options: dict[str, Any]) -> SerdePair:
        with self.lock:
            self.pairs.append(dict(options))
        return SerdePair(IdentitySerializer(), IdentityDeserializer())


@pytest.fixture
def pair_serde() -> Iterator[_Calls]:
    calls = _Calls()
    spec = SerdeSpec(pair_factory=calls.pair, description="pair test serde",
                     options=(max_workers_option(1),), size_contract=SerdeSizeContract.EXACT)
    register_serde_factory("pair-test", spec)
    yield calls
    unregister_serde_factory("pair-test")


def test_a_spec_needs_exactly_one_builder() -> None:
    with pytest.raises(TypeError, match="exactly one of factory"):
        SerdeSpec()
    with pytest.raises(TypeError, match="exactly one of factory"):
        SerdeSpec(factory=lambda kw: None,  # type: ignore[arg-type,return-value]
                  pair_factory=lambda kw: None)  # type: ignore[arg-type,return-value]


def test_core_builds_the_processor_from_the_pair(pair_serde: _Calls) -> None:
    proc = create_serde_processor({"type": "pair-test", "max_workers": 3})
    try:
        assert isinstance(proc, AsyncSerdeProcessor)
        assert proc.max_workers == 3 and proc.serde_type == "pair-test"
        assert proc.size_contract is SerdeSizeContract.EXACT  # comes with the same lookup
        # max_workers does not change the bytes: not part of the identity
        assert proc.get_config() == {"type": "pair-test", "format_version": 1, "options": {}}
        assert pair_serde.pairs == [{"max_workers": 3}]
        src = random_object(LAYOUT, 7)
        blob = TensorMemoryObj.allocate(MemoryLayoutDesc([[LAYOUT.nbytes]], [torch.uint8]))
        assert wait_for_result(proc, proc.submit_serialize([src], [blob], [KEY]), serialize=True)
        out = TensorMemoryObj.allocate(LAYOUT, zero=True)
        assert wait_for_result(proc, proc.submit_deserialize([blob], [out], [KEY]),
                               serialize=False)
        assert torch.equal(out.raw_data, src.raw_data)
    finally:
        proc.close()


@pytest.mark.parametrize("bad", [lambda kw: "not a pair", lambda kw: (_ for _ in ()).throw(
    SystemExit(3))])
def test_a_bad_pair_factory_is_a_plugin_error(bad: Any) -> None:
    register_serde_factory("bad-pair-test", SerdeSpec(pair_factory=bad, options=()))
    try:
        with pytest.raises(PluginLoadError, match="serde 'bad-pair-test' \\(registered "
                                                  "programmatically\\) failed to build"):
            create_serde_processor({"type": "bad-pair-test"})
        with pytest.raises(PluginLoadError, match="failed to build"):
            create_serde_chain([{"type": "identity"}, {"type": "bad-pair-test"}])
    finally:
        unregister_serde_factory("bad-pair-test")


def test_a_chain_of_pair_serdes_is_one_processor(
        pair_serde: _Calls, monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[str] = []
    original = processor.AsyncSerdeProcessor.__init__

    def counting_init(self: AsyncSerdeProcessor, *args: Any, **kwargs: Any) -> None:
        built.append(type(self).__name__)
        original(self, *args, **kwargs)

    monkeypatch.setattr(processor.AsyncSerdeProcessor, "__init__", counting_init)
    chain = create_serde_chain([{"type": "identity"}, {"type": "pair-test", "max_workers": 2},
                                {"type": "pair-test"}])
    try:
        assert built == ["SerdeChainProcessor"]  # no thread pool or event fds per stage
        assert chain.max_workers == 2
        assert pair_serde.pairs == [{"max_workers": 2}, {"max_workers": 1}]
        assert [s["type"] for s in chain.get_config()["stages"]] == [
            "identity", "pair-test", "pair-test"]
    finally:
        chain.close()


def test_a_factory_only_serde_still_chains_through_its_processor() -> None:
    made: list[AsyncSerdeProcessor] = []

    def factory(kwargs: dict[str, Any]) -> AsyncSerdeProcessor:
        made.append(AsyncSerdeProcessor(IdentitySerializer(), IdentityDeserializer(), 3))
        return made[-1]

    register_serde_factory("upstream-test", factory, size_contract=SerdeSizeContract.EXACT)
    try:
        chain = create_serde_chain([{"type": "upstream-test"}, {"type": "identity"}])
        assert chain.max_workers == 3 and len(made) == 1 and not made[0].closed
        chain.close()
        assert made[0].closed  # owned by the chain
    finally:
        unregister_serde_factory("upstream-test")


def test_a_chained_config_is_looked_up_once_per_stage(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    looked_up: list[str] = []
    original = SERDES.get

    def counting_get(name: str) -> Any:
        looked_up.append(name)
        return original(name)

    monkeypatch.setattr(SERDES, "get", counting_get)
    l1 = L1Manager(1 << 22)
    adapter = create_l2_adapter({"type": "memory", "serde": [{"type": "identity"},
                                                             {"type": "identity"}]}, l1)
    adapter.close()
    assert looked_up == ["identity", "identity"]
    looked_up.clear()
    adapter = create_l2_adapter({"type": "memory", "serde": {"type": "identity"}}, l1)
    try:
        assert looked_up == ["identity"]
        assert adapter.size_contract is SerdeSizeContract.EXACT  # type: ignore[attr-defined]
    finally:
        adapter.close()


def test_serde_config_parsing_and_its_errors_live_in_one_place() -> None:
    assert as_serde_config({"type": "fp8", "scaling": "none"}).kwargs == {"scaling": "none"}
    with pytest.raises(ValueError, match="^'serde' dict must include a 'type' field$"):
        as_serde_config({"scaling": "none"})
    with pytest.raises(ValueError, match="^'serde' must be a dict, got str"):
        as_serde_config("fp8")
    for bad in ({"type": 3}, {}):
        with pytest.raises(ValueError, match="'serde' dict must include a 'type' field"):
            create_serde_processor(bad)
        with pytest.raises(ValueError, match="'serde' dict must include a 'type' field"):
            create_serde_chain([{"type": "identity"}, bad])
        with pytest.raises(ValueError, match="'serde' dict must include a 'type' field"):
            create_l2_adapter({"type": "memory", "serde": bad}, L1Manager(1 << 20))
    resolved = resolve_serde({"type": "identity", "max_workers": 2})
    assert resolved.options == {"max_workers": 2, "close_timeout_s": 10.0}
    assert resolved.max_workers == 2 and resolved.close_timeout_s == 10.0
    assert resolved.size_contract is SerdeSizeContract.EXACT


def test_the_processor_contract_is_declared_on_the_abc() -> None:
    class Minimal(SerdeProcessor):
        def get_serialize_event_fd(self) -> int:
            return 0

        def get_deserialize_event_fd(self) -> int:
            return 1

        def submit_serialize(self, *args: Any) -> int:
            return 0

        def query_serialize_result(self, task_id: int) -> bool | None:
            return None

        def submit_deserialize(self, *args: Any) -> int:
            return 0

        def query_deserialize_result(self, task_id: int) -> bool | None:
            return None

        def estimate_serialized_size(self, layout_desc: Any) -> int:
            return 0

        def close(self) -> None:
            pass

    minimal = Minimal()
    assert minimal.serde_pair() is None and minimal.size_contract is None
    assert minimal.serde_type is None and minimal.reports_item_outcomes is False
    assert minimal.get_config() == {"type": "Minimal"}
    with pytest.raises(NotImplementedError):
        minimal.query_deserialize_outcome(0)
    with AsyncSerdeProcessor(IdentitySerializer(), IdentityDeserializer()) as proc:
        assert proc.reports_item_outcomes is True
        pair = proc.serde_pair()
        assert isinstance(pair.serializer, IdentitySerializer)
        assert isinstance(pair.deserializer, IdentityDeserializer)
