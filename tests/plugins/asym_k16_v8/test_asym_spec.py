"""Registration, options and processors of the two serde types (upstream checklist I.2, asym part)."""

from __future__ import annotations

from importlib.metadata import entry_points

import pytest
from lmserde import (
    AsyncSerdeProcessor,
    SerdeConfig,
    SerdeSizeContract,
    StoragePlacementMode,
    create_serde_processor,
    get_serde_size_contract,
    get_serde_spec,
)
from lmserde_asym_k16_v8 import ASYM_K16_V8_SPEC, ASYM_K16_V8_V_ONLY_SPEC

TYPES = ("asym_k16_v8", "asym_k16_v8_v_only")


def test_entry_points_declared() -> None:
    eps = {ep.name: ep.value for ep in entry_points(group="lmcache.serde")}
    assert eps["asym_k16_v8"] == "lmserde_asym_k16_v8.spec:ASYM_K16_V8_SPEC"
    assert eps["asym_k16_v8_v_only"] == "lmserde_asym_k16_v8.spec:ASYM_K16_V8_V_ONLY_SPEC"
    assert get_serde_spec("asym_k16_v8") is ASYM_K16_V8_SPEC
    assert get_serde_spec("asym_k16_v8_v_only") is ASYM_K16_V8_V_ONLY_SPEC


def test_the_v_only_serde_declares_split_tier_placement() -> None:
    """``asym_k16_v8_v_only`` is split-tier because its spec says so (not because of its name)."""
    assert ASYM_K16_V8_V_ONLY_SPEC.placement is StoragePlacementMode.KV_SPLIT_TIER
    assert ASYM_K16_V8_SPEC.placement is StoragePlacementMode.KV_TOGETHER


@pytest.mark.parametrize("name", TYPES)
def test_upper_bound_and_lossy(name: str) -> None:
    assert get_serde_size_contract(name) is SerdeSizeContract.UPPER_BOUND
    assert get_serde_spec(name).lossy


@pytest.mark.parametrize(
    ("name", "mapping"), [("asym_k16_v8", (0, 1)), ("asym_k16_v8_v_only", (None, 1))]
)
def test_processor_accessors(name: str, mapping: tuple[int | None, ...]) -> None:
    proc = create_serde_processor(SerdeConfig(name))
    try:
        assert isinstance(proc, AsyncSerdeProcessor)
        assert proc.serializer_group_size() == proc.deserializer_group_size() == 2
        assert proc.input_slot_mapping() == proc.output_slot_mapping() == mapping
        assert proc.max_workers == 4  # upstream's default for these serdes
        assert proc.get_serialize_event_fd() != proc.get_deserialize_event_fd()
    finally:
        proc.close()


@pytest.mark.parametrize("name", TYPES)
def test_all_options_accepted(name: str) -> None:
    kwargs = {"fp8_dtype": "float8_e4m3fn", "scale_scope": "PER_TENSOR", "scale_dtype": "float32",
              "max_workers": 2}
    if name.endswith("v_only"):
        kwargs["k_dtype_tag"] = "float16"
    proc = create_serde_processor(SerdeConfig(name, kwargs))
    try:
        assert proc.max_workers == 2
    finally:
        proc.close()


@pytest.mark.parametrize("name", TYPES)
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"fp8_dtype": "float8_e4m3"}, "Unknown torch dtype: 'float8_e4m3'"),
        ({"fp8_dtype": "nn"}, "Unknown torch dtype: 'nn'"),
        ({"fp8_dtype": "float8_e5m2"}, "fp8_dtype 'float8_e5m2' is not supported.*float8_e4m3fn"),
        ({"fp8_dtype": "float16"}, "fp8_dtype 'float16' is not supported"),
        ({"scale_scope": "PER_ROW"}, "Unknown ScaleScope 'PER_ROW'. Valid: PER_TENSOR"),
        ({"scale_scope": "PER_LAYER_HEAD"}, "PER_LAYER_HEAD is not supported.*supported: PER_TENSOR"),
        ({"scale_dtype": "float16"}, "scale_dtype 'float16' is not supported.*float32"),
        ({"scale_dtype": "float33"}, "Unknown torch dtype: 'float33'"),
        ({"max_workers": 0}, "max_workers"),
        ({"max_workers": 1.5}, "max_workers"),
        ({"fp8_dtpye": "float8_e4m3fn"}, "Unknown option 'fp8_dtpye'.*fp8_dtype"),
    ],
)
def test_bad_options_rejected(name: str, kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        create_serde_processor(SerdeConfig(name, kwargs))


def test_k_dtype_tag_only_for_v_only() -> None:
    with pytest.raises(ValueError, match="Unknown option 'k_dtype_tag'"):
        create_serde_processor(SerdeConfig("asym_k16_v8", {"k_dtype_tag": "bfloat16"}))
    with pytest.raises(ValueError, match="Unknown torch dtype: 'bf16'"):
        create_serde_processor(SerdeConfig("asym_k16_v8_v_only", {"k_dtype_tag": "bf16"}))


def test_factories_work_with_plain_kwargs() -> None:
    """Built directly from upstream-style partial kwargs, the defaults are filled in."""
    for name, spec in (("asym_k16_v8", ASYM_K16_V8_SPEC),
                       ("asym_k16_v8_v_only", ASYM_K16_V8_V_ONLY_SPEC)):
        proc = spec.create_processor(name, {})
        try:
            assert proc.max_workers == 4
        finally:
            proc.close()
