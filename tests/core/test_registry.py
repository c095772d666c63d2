"""Registry, config parsing and option validation (upstream checklist I.2 and lmserde's additions)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lmserde import (
    AsyncSerdeProcessor,
    PluginLoadError,
    SerdeConfig,
    SerdeOption,
    SerdeSizeContract,
    SerdeSpec,
    create_serde_processor,
    get_registered_serde_types,
    get_serde_size_contract,
    install_hints,
    max_workers_option,
    register_serde_factory,
    registry,
)
from lmserde.identity import IdentityDeserializer, IdentitySerializer
from lmserde.plugin_discovery import EntryPointGroup
from lmserde.registry import unregister_serde_factory

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def registered() -> Iterator[list[str]]:
    names: list[str] = []
    yield names
    for name in names:
        unregister_serde_factory(name)


def test_identity_is_discovered_and_builds_a_processor() -> None:
    assert "identity" in get_registered_serde_types()
    proc = create_serde_processor(SerdeConfig("identity"))
    try:
        assert isinstance(proc, AsyncSerdeProcessor)
        assert proc.get_serialize_event_fd() != proc.get_deserialize_event_fd()
    finally:
        proc.close()
    assert get_serde_size_contract("identity") is SerdeSizeContract.EXACT


def test_unknown_type_lists_registered_types() -> None:
    with pytest.raises(ValueError, match="Unknown serde type 'nope'. Registered: .*identity"):
        create_serde_processor(SerdeConfig("nope"))


def test_unknown_type_of_a_shipped_plugin_gets_a_pip_hint(monkeypatch: Any) -> None:
    # simulate an environment where the plugin distribution is not installed, with core run
    # from this checkout's root (the README's commands; tests/core/test_install_hints.py has
    # the other places a core can come from)
    monkeypatch.setattr(registry.SERDES, "_group", EntryPointGroup("lmserde.tests.empty-group"))
    monkeypatch.setattr(install_hints, "checkout_root", lambda: REPO_ROOT)
    monkeypatch.chdir(REPO_ROOT)
    with pytest.raises(ValueError, match=r"'turboquant' is provided by lmserde-turboquant\. "
                                         r"Install it with: pip install -c constraints\.txt "
                                         r"\./plugins/turboquant$"):
        create_serde_processor(SerdeConfig("turboquant"))
    with pytest.raises(ValueError, match=r"pip install -c constraints\.txt \./plugins/asym_k16_v8$"):
        create_serde_processor(SerdeConfig("asym_k16_v8_v_only"))
    monkeypatch.setattr(install_hints, "checkout_root", lambda: None)  # core from wheels
    with pytest.raises(ValueError, match=r"pip install -c constraints\.txt --find-links DIR "
                                         r"lmserde-zstd \(DIR: the wheels `nox -s build` writes"):
        create_serde_processor(SerdeConfig("zstd"))


def test_a_mistyped_serde_type_gets_the_closest_name(monkeypatch: Any) -> None:
    with pytest.raises(ValueError, match=r"Unknown serde type 'identiy'\. Registered: .*identity.*"
                                         r"\. Did you mean 'identity'\?$"):
        create_serde_processor(SerdeConfig("identiy"))
    with pytest.raises(ValueError) as info:
        create_serde_processor(SerdeConfig("nope"))
    assert "Did you mean" not in str(info.value)
    # the closest name may be a plugin of this repository that is not installed: then its hint
    monkeypatch.setattr(registry.SERDES, "_group", EntryPointGroup("lmserde.tests.empty-group"))
    monkeypatch.setattr(install_hints, "checkout_root", lambda: REPO_ROOT)
    monkeypatch.chdir(REPO_ROOT)
    with pytest.raises(ValueError, match=r"Unknown serde type 'turboqaunt'\. Registered: \(none\)\. "
                                         r"Did you mean 'turboquant'\? 'turboquant' is provided by "
                                         r"lmserde-turboquant\. Install it with: pip install -c "
                                         r"constraints\.txt \./plugins/turboquant$"):
        create_serde_processor(SerdeConfig("turboqaunt"))


def test_max_workers_accepts_an_int() -> None:
    proc = create_serde_processor({"type": "identity", "max_workers": 2})
    try:
        assert proc.max_workers == 2  # type: ignore[attr-defined]
    finally:
        proc.close()


@pytest.mark.parametrize("value", [1.5, 2.0, "2", True, "two", 0])
def test_max_workers_rejects_nonsense(value: Any) -> None:
    with pytest.raises(ValueError, match="max_workers"):
        create_serde_processor({"type": "identity", "max_workers": value})


def test_unknown_option_names_accepted_options_and_closest_match() -> None:
    with pytest.raises(ValueError) as info:
        create_serde_processor({"type": "identity", "max_worker": 2})
    message = str(info.value)
    assert "'max_worker'" in message
    assert "Accepted options: close_timeout_s, max_workers" in message
    assert "Did you mean 'max_workers'?" in message


def test_custom_factory_receives_exactly_its_kwargs(registered: list[str]) -> None:
    received: list[dict[str, Any]] = []

    def factory(kwargs: dict[str, Any]) -> AsyncSerdeProcessor:
        received.append(kwargs)
        return AsyncSerdeProcessor(IdentitySerializer(), IdentityDeserializer())

    register_serde_factory("test_custom", factory)
    registered.append("test_custom")
    create_serde_processor(SerdeConfig("test_custom", {"foo": "bar"})).close()
    assert received == [{"foo": "bar"}]
    assert get_serde_size_contract("test_custom") is SerdeSizeContract.UPPER_BOUND


def test_duplicate_registration_is_rejected(registered: list[str]) -> None:
    with pytest.raises(ValueError, match="already registered"):
        register_serde_factory("identity", lambda kw: None)  # type: ignore[arg-type,return-value]
    register_serde_factory("test_dup", lambda kw: None)  # type: ignore[arg-type,return-value]
    registered.append("test_dup")
    with pytest.raises(ValueError, match="already registered"):
        register_serde_factory("test_dup", lambda kw: None)  # type: ignore[arg-type,return-value]


def test_registration_order_is_kept(registered: list[str]) -> None:
    for name in ("test_b", "test_a"):
        register_serde_factory(name, lambda kw: None)  # type: ignore[arg-type,return-value]
        registered.append(name)
    names = get_registered_serde_types()
    assert names.index("test_b") < names.index("test_a")


def test_spec_options_are_validated_coerced_and_defaulted(registered: list[str]) -> None:
    received: list[dict[str, Any]] = []

    def factory(kwargs: dict[str, Any]) -> AsyncSerdeProcessor:
        received.append(kwargs)
        return AsyncSerdeProcessor(IdentitySerializer(), IdentityDeserializer(),
                                   kwargs["max_workers"])

    spec = SerdeSpec(
        factory=factory,
        options=(SerdeOption("mode", str, "fast", "how", choices=("fast", "slow")),
                 SerdeOption("level", int, 3, "level", minimum=1),
                 SerdeOption("ratio", float, 0.5, "ratio"),
                 SerdeOption("strict", bool, False, "strict"),
                 max_workers_option(1)),
        size_contract=SerdeSizeContract.EXACT,
    )
    register_serde_factory("test_spec", spec)
    registered.append("test_spec")
    create_serde_processor({"type": "test_spec", "level": 4, "strict": "true"}).close()
    assert received == [{"mode": "fast", "level": 4, "ratio": 0.5, "strict": True,
                         "max_workers": 1}]
    with pytest.raises(ValueError, match="'mode' must be one of 'fast', 'slow'"):
        create_serde_processor({"type": "test_spec", "mode": "medium"})
    with pytest.raises(ValueError, match="'level' must be >= 1"):
        create_serde_processor({"type": "test_spec", "level": 0})
    assert get_serde_size_contract("test_spec") is SerdeSizeContract.EXACT


def test_required_option_is_reported(registered: list[str]) -> None:
    spec = SerdeSpec(factory=lambda kw: None,  # type: ignore[arg-type,return-value]
                     options=(SerdeOption("path", str, required=True, help="key file"),))
    register_serde_factory("test_required", spec)
    registered.append("test_required")
    with pytest.raises(ValueError, match="requires option 'path'"):
        create_serde_processor({"type": "test_required"})


def test_factory_error_names_origin_and_chains_the_cause(registered: list[str]) -> None:
    def factory(kwargs: dict[str, Any]) -> AsyncSerdeProcessor:
        raise OSError("cannot open key file")

    register_serde_factory("test_raises", factory)
    registered.append("test_raises")
    with pytest.raises(PluginLoadError, match="test_raises.*cannot open key file") as info:
        create_serde_processor({"type": "test_raises"})
    assert isinstance(info.value.__cause__, OSError)
    assert isinstance(info.value, ValueError)


def test_dict_config_without_type_is_rejected() -> None:
    with pytest.raises(ValueError, match="'serde' dict must include a 'type' field"):
        create_serde_processor({"max_workers": 1})
