"""The config identity API: ``get_config()``, ``SerdeOption.identity``, ``format_version`` and
``authenticates_output()`` (the stored-object frame records and checks them)."""

from __future__ import annotations

import enum
import json
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from lmserde import (
    AsyncSerdeProcessor,
    SerdeOption,
    SerdeProcessor,
    SerdeSizeContract,
    SerdeSpec,
    Serializer,
    create_serde_processor,
    max_workers_option,
)
from lmserde.config_identity import canonical_value
from lmserde.identity import IdentityDeserializer, IdentitySerializer
from lmserde.registry import register_serde_factory, unregister_serde_factory
from lmserde.serde_chain import create_serde_chain


class Mode(enum.Enum):
    FAST = "fast"
    SMALL = "small"


class AuthSerializer(IdentitySerializer):
    authenticates_output = True


def _build(kwargs: dict[str, Any]) -> AsyncSerdeProcessor:
    serializer = AuthSerializer() if kwargs.get("auth") else IdentitySerializer()
    return AsyncSerdeProcessor(serializer, IdentityDeserializer(),
                               kwargs.get("max_workers", 1), serde_type="t_ident")


SPEC = SerdeSpec(
    factory=_build,
    options=(
        SerdeOption("level", int, 3, "compression level", minimum=0, maximum=22),
        SerdeOption("dtype", object, torch.float16, "a torch dtype"),
        SerdeOption("mode", object, Mode.FAST, "an enum"),
        SerdeOption("salt", object, b"\x01\x02", "bytes"),
        SerdeOption("dims", object, (1, 2), "a tuple"),
        SerdeOption("key_path", str, "", "where a key lives", identity=False),
        SerdeOption("auth", bool, False, "authenticated output"),
        max_workers_option(),
    ),
    size_contract=SerdeSizeContract.EXACT,
    format_version=7,
)


def _plain_factory(kwargs: dict[str, Any]) -> AsyncSerdeProcessor:
    """An upstream-style factory (options=None)."""
    return AsyncSerdeProcessor(IdentitySerializer(), IdentityDeserializer(), serde_type="t_up")


@pytest.fixture(autouse=True)
def registered() -> Iterator[None]:
    register_serde_factory("t_ident", SPEC)
    register_serde_factory("t_up", _plain_factory)
    yield
    unregister_serde_factory("t_ident")
    unregister_serde_factory("t_up")


def _config(**kwargs: Any) -> dict[str, Any]:
    proc = create_serde_processor({"type": "t_ident", **kwargs})
    try:
        return proc.get_config()
    finally:
        proc.close()


def test_config_is_canonical_json_of_the_identity_options() -> None:
    config = _config(level=5, key_path="/secret/k", max_workers=4)
    assert config == {
        "type": "t_ident",
        "format_version": 7,
        "options": {"auth": False, "dims": [1, 2], "dtype": "torch.float16", "level": 5,
                    "mode": "fast", "salt": "0102"},
    }
    assert list(config["options"]) == sorted(config["options"])
    assert json.loads(json.dumps(config, allow_nan=False)) == config


def test_non_identity_options_do_not_change_the_config() -> None:
    assert _config(key_path="/a", max_workers=1) == _config(key_path="/b", max_workers=8)


def test_identity_options_change_the_config() -> None:
    assert _config(level=1) != _config(level=2)
    assert _config(dtype=torch.bfloat16) != _config()
    assert _config(mode=Mode.SMALL) != _config()


def test_get_config_returns_a_copy() -> None:
    proc = create_serde_processor({"type": "t_ident"})
    try:
        proc.get_config()["options"]["level"] = 99
        assert proc.get_config()["options"]["level"] == 3
    finally:
        proc.close()


def test_plain_factories_use_every_kwarg() -> None:
    proc = create_serde_processor({"type": "t_up", "b": (1, 2), "a": 1})
    try:
        assert proc.get_config() == {"type": "t_up", "format_version": 1,
                                     "options": {"a": 1, "b": [1, 2]}}
    finally:
        proc.close()


def test_default_config_without_the_registry() -> None:
    proc = AsyncSerdeProcessor(IdentitySerializer(), IdentityDeserializer(), serde_type="direct")
    try:
        assert proc.get_config() == {"type": "direct"}
    finally:
        proc.close()

    class Bare(SerdeProcessor):
        def get_serialize_event_fd(self) -> int: return -1
        def get_deserialize_event_fd(self) -> int: return -1
        def submit_serialize(self, *a: Any) -> int: return 0
        def query_serialize_result(self, task_id: int) -> bool | None: return None
        def submit_deserialize(self, *a: Any) -> int: return 0
        def query_deserialize_result(self, task_id: int) -> bool | None: return None
        def estimate_serialized_size(self, layout_desc: Any) -> int: return 0
        def close(self) -> None: pass

    bare = Bare()
    assert bare.get_config() == {"type": "Bare"}
    assert bare.authenticates_output() is False
    bare.set_config({"type": "bare", "options": {"x": [1]}})
    assert bare.get_config() == {"type": "bare", "options": {"x": [1]}}
    with pytest.raises(ValueError, match="JSON-serializable"):
        bare.set_config({"type": object()})


def test_chain_config_lists_the_stages_in_order() -> None:
    chain = create_serde_chain([{"type": "t_ident", "level": 1, "max_workers": 2},
                                {"type": "t_up", "z": 1}])
    try:
        assert chain.get_config() == {"type": "chain", "stages": [
            _config(level=1), {"type": "t_up", "format_version": 1, "options": {"z": 1}}]}
    finally:
        chain.close()


def test_authenticates_output_follows_the_serializer_and_the_last_chain_stage() -> None:
    for auth in (False, True):
        proc = create_serde_processor({"type": "t_ident", "auth": auth})
        try:
            assert proc.authenticates_output() is auth
        finally:
            proc.close()
    authed_last = create_serde_chain([{"type": "t_up"}, {"type": "t_ident", "auth": True}])
    authed_first = create_serde_chain([{"type": "t_ident", "auth": True}, {"type": "t_up"}])
    try:
        assert authed_last.authenticates_output() is True
        assert authed_first.authenticates_output() is False
    finally:
        authed_last.close()
        authed_first.close()
    assert Serializer.authenticates_output is False


_levels = st.integers(min_value=0, max_value=22)
_paths = st.text(max_size=8)
_workers = st.integers(min_value=1, max_value=8)


@given(a=st.tuples(_levels, _paths, _workers, st.booleans()),
       b=st.tuples(_levels, _paths, _workers, st.booleans()))
def test_equal_identity_options_iff_equal_configs(a: tuple[Any, ...], b: tuple[Any, ...]) -> None:
    def config(values: tuple[Any, ...]) -> dict[str, Any]:
        level, path, workers, auth = values
        return _config(level=level, key_path=path, max_workers=workers, auth=auth)

    same_identity = (a[0], a[3]) == (b[0], b[3])
    assert (config(a) == config(b)) is same_identity


@given(st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text()
    | st.binary(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.tuples(inner, inner)
    | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=10))
def test_canonical_values_are_json_and_stable(value: Any) -> None:
    once = canonical_value(value)
    text = json.dumps(once, allow_nan=False, sort_keys=True)
    assert canonical_value(json.loads(text)) == once


def test_canonical_value_examples() -> None:
    assert canonical_value(torch.bfloat16) == "torch.bfloat16"
    assert canonical_value(Mode.SMALL) == "small"
    assert canonical_value(b"\xff\x00") == "ff00"
    assert canonical_value((1, (2, 3))) == [1, [2, 3]]
    assert canonical_value({"b": 1, "a": {2: "x"}}) == {"a": {"2": "x"}, "b": 1}
    assert canonical_value(-0.0) == 0.0 and canonical_value(float("inf")) == "inf"

