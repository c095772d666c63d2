"""Issue #13, case 6: what would fail every store at run time fails when the config is created."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from lmserde import (
    AsyncSerdeProcessor,
    DataKind,
    SerdeOption,
    SerdeSizeContract,
    SerdeSpec,
    max_workers_option,
)
from lmserde.identity import IdentityDeserializer, IdentitySerializer
from lmserde.l1 import L1Manager
from lmserde.l2 import FaultPlan, create_l2_adapter
from lmserde.options import MAX_WORKERS_LIMIT
from lmserde.registry import register_serde_factory, unregister_serde_factory
from lmserde.serde_chain import check_chain_configs, create_serde_chain

BUILT: list[str] = []


def _factory(name: str) -> Any:
    def build(kwargs: dict[str, Any]) -> AsyncSerdeProcessor:
        BUILT.append(name)
        return AsyncSerdeProcessor(IdentitySerializer(), IdentityDeserializer(), serde_type=name)
    return build


TOY_SPECS = {
    # a quantizer: KV tensors in, bytes out
    "t_quant": SerdeSpec(factory=_factory("t_quant"), options=(max_workers_option(),),
                         size_contract=SerdeSizeContract.EXACT,
                         consumes=frozenset({DataKind.KV_TENSORS}),
                         consumes_hint="t_quant reads KV tensors."),
    # a compressor: anything but ciphertext in, bytes out
    "t_compress": SerdeSpec(factory=_factory("t_compress"), options=(),
                            size_contract=SerdeSizeContract.EXACT,
                            consumes=frozenset({DataKind.KV_TENSORS, DataKind.BYTES})),
    # an encryptor: anything in, ciphertext out
    "t_encrypt": SerdeSpec(factory=_factory("t_encrypt"), options=(),
                           size_contract=SerdeSizeContract.EXACT,
                           produces=DataKind.CIPHERTEXT),
    # an unrestricted third-party serde (the defaults)
    "t_plain": SerdeSpec(factory=_factory("t_plain"), options=(),
                         size_contract=SerdeSizeContract.EXACT),
}


@pytest.fixture(autouse=True)
def toy_serdes() -> Iterator[None]:
    for name, spec in TOY_SPECS.items():
        register_serde_factory(name, spec)
    BUILT.clear()
    yield
    for name in TOY_SPECS:
        unregister_serde_factory(name)


def _chain(*names: str) -> list[dict[str, Any]]:
    return [{"type": n} for n in names]


def test_defaults_leave_unknown_serdes_unrestricted() -> None:
    spec = TOY_SPECS["t_plain"]
    assert spec.consumes == frozenset(DataKind) and spec.produces is DataKind.BYTES
    assert spec.format_version == 1
    check_chain_configs(_chain("t_encrypt", "t_plain", "t_plain"))


@pytest.mark.parametrize("names", [("t_quant", "t_compress", "t_encrypt"), ("t_quant",),
                                   ("t_compress", "t_encrypt"), ("t_encrypt", "t_plain")])
def test_chains_that_compose_build(names: tuple[str, ...]) -> None:
    chain = create_serde_chain(_chain(*names))
    chain.close()
    assert list(names) == BUILT


@pytest.mark.parametrize("names, stage, got, accepts", [
    (("t_quant", "t_quant"), "stage 2 ('t_quant')", "receives bytes", "accepts only kv_tensors"),
    (("t_compress", "t_quant"), "stage 2 ('t_quant')", "receives bytes", "kv_tensors"),
    (("t_encrypt", "t_compress"), "stage 2 ('t_compress')", "receives ciphertext",
     "accepts only bytes, kv_tensors"),
    (("t_quant", "t_encrypt", "t_quant"), "stage 3 ('t_quant')", "receives ciphertext",
     "kv_tensors"),
])
def test_chains_that_do_not_compose_fail_at_config_time(
    names: tuple[str, ...], stage: str, got: str, accepts: str,
) -> None:
    with pytest.raises(ValueError) as info:
        create_serde_chain(_chain(*names))
    message = str(info.value)
    assert stage in message and got in message and accepts in message
    assert BUILT == []  # nothing was built for a chain that cannot work
    if "ciphertext" in got:
        assert "pointless" in message and "before the encryption stage" in message


def test_consumes_hint_is_part_of_the_message() -> None:
    with pytest.raises(ValueError, match="t_quant reads KV tensors"):
        check_chain_configs(_chain("t_compress", "t_quant"))


def test_adapter_with_a_bad_chain_fails_before_the_adapter_is_built(tmp_path: Any) -> None:
    base = tmp_path / "kv"
    with pytest.raises(ValueError, match="stage 2 \\('t_quant'\\)"):
        create_l2_adapter({"type": "fs", "base_path": str(base),
                           "serde": _chain("t_encrypt", "t_quant")}, L1Manager(1 << 20))
    assert not base.exists() and BUILT == []


def test_chain_stage_with_bad_option_names_the_stage() -> None:
    with pytest.raises(ValueError, match="stage 1: serde 't_quant': option 'max_workers'"):
        check_chain_configs([{"type": "t_quant", "max_workers": 0}, {"type": "t_encrypt"}])


def test_spec_rejects_malformed_kinds() -> None:
    with pytest.raises(TypeError, match="consumes"):
        SerdeSpec(factory=_factory("x"), consumes=frozenset())
    with pytest.raises(TypeError, match="consumes"):
        SerdeSpec(factory=_factory("x"), consumes=frozenset({"bytes"}))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="produces"):
        SerdeSpec(factory=_factory("x"), produces="bytes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="format_version"):
        SerdeSpec(factory=_factory("x"), format_version=0)


# -- numeric options ----------------------------------------------------------------------------

@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_float_options_reject_non_finite_values(value: Any) -> None:
    option = SerdeOption("timeout", float, 1.0, minimum=0.0)
    with pytest.raises(ValueError, match="'timeout' must be a finite number"):
        option.coerce(value)


def test_non_finite_allowed_only_when_declared() -> None:
    option = SerdeOption("limit", float, 1.0, allow_nonfinite=True)
    assert option.coerce(math.inf) == math.inf
    with pytest.raises(ValueError, match="'limit' must be a number"):
        option.coerce("inf")  # a string is never a number (issue #27 case 8)


@given(st.integers(min_value=-(10**30), max_value=10**30))
def test_int_bounds_are_inclusive(value: int) -> None:
    option = SerdeOption("n", int, 1, minimum=-5, maximum=100)
    if -5 <= value <= 100:
        assert option.coerce(value) == value
    else:
        with pytest.raises(ValueError, match="'n' must be (>= -5|<= 100)"):
            option.coerce(value)


def test_max_workers_has_an_upper_bound() -> None:
    option = max_workers_option()
    assert option.coerce(MAX_WORKERS_LIMIT) == MAX_WORKERS_LIMIT
    with pytest.raises(ValueError, match="'max_workers' must be <="):
        option.coerce(MAX_WORKERS_LIMIT + 1)
    assert option.identity is False


@pytest.mark.parametrize("options, message", [
    ({"seed": 2**200}, "seed"),
    ({"seed": -(2**127) - 1}, "seed"),
    ({"delay_seconds": math.inf}, "delay_seconds"),
    ({"delay_seconds": math.nan}, "delay_seconds"),
    ({"delay_seconds": 1e9}, "delay_seconds"),
    ({"store_failure_rate": math.nan}, "store_failure_rate"),
    ({"bandwidth_bytes_per_second": -1.0}, "bandwidth_bytes_per_second"),
    ({"bandwidth_bytes_per_second": math.inf}, "bandwidth_bytes_per_second"),
    ({"bandwidth_bytes_per_second": math.nan}, "bandwidth_bytes_per_second"),
])
def test_fault_adapter_options_are_range_checked(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        create_l2_adapter({"type": "fault", "inner": {"type": "memory"}, **options})
    with pytest.raises(ValueError, match=message):
        FaultPlan(**options)


def test_fault_adapter_extreme_valid_seeds_work() -> None:
    for seed in (2**127 - 1, -(2**127)):
        adapter = create_l2_adapter({"type": "fault", "inner": {"type": "memory"}, "seed": seed,
                                     "load_miss_rate": 0.5})
        adapter.close()
        assert 0.0 <= FaultPlan(seed=seed).draw("x", []) < 1.0
