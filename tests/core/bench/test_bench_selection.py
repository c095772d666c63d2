"""Serde and adapter selection, chunk objects, codec timing and the data path in isolation."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from lmserde import SerdeConfig, SerdeOption, SerdeSpec, create_serde_processor
from lmserde.bench import serde_selection
from lmserde.bench.adapter_choice import (
    complete_adapter_spec,
    parse_adapter_arg,
    validate_adapter_spec,
)
from lmserde.bench.chunk_objects import (
    ChunkForm,
    chunk_form,
    make_object,
    read_kv,
    serialized_capacity,
)
from lmserde.bench.codec_timing import SerdeTaskError, measure_codec
from lmserde.bench.data_path import DataPathError, run_data_path
from lmserde.bench.kv_generators import SyntheticKVGenerator
from lmserde.bench.model_shapes import get_model_shape
from lmserde.bench.serde_selection import (
    BenchInputError,
    BenchSerde,
    RunContext,
    complete_config,
    default_serdes,
    label_for,
    parse_serde_arg,
    unique_labels,
    validate_serde_config,
)
from lmserde.identity import IDENTITY_SPEC
from lmserde.keys import ObjectKey
from lmserde.l2 import FRAME_HEADER_BYTES
from lmserde.memory import TensorMemoryObj
from lmserde.registry import SerdeInfo


def test_parse_serde_arg_accepts_names_objects_and_chains() -> None:
    assert parse_serde_arg("fp8") == {"type": "fp8"}
    assert parse_serde_arg(' {"type": "fp8", "fp8_dtype": "float8_e5m2"} ') == {
        "type": "fp8", "fp8_dtype": "float8_e5m2"}
    assert parse_serde_arg('[{"type": "fp8"}, {"type": "aesgcm"}]') == [{"type": "fp8"},
                                                                        {"type": "aesgcm"}]


@pytest.mark.parametrize(("text", "message"), [
    ("", "needs a serde type"),
    ("fp8;rm", "neither a serde type name"),
    ("{bad json}", "not valid JSON"),
    ('{"type": 3}', "needs a 'type' field"),
    ('["fp8"]', "each serde must be a JSON object"),
    ("[]", "at least one serde"),
])
def test_parse_serde_arg_rejects_malformed_input(text: str, message: str) -> None:
    with pytest.raises(BenchInputError, match=message):
        parse_serde_arg(text)


@given(st.dictionaries(st.text("abcdefgh_", min_size=1, max_size=8).filter(lambda k: k != "type"),
                       st.one_of(st.integers(), st.text(max_size=5), st.booleans()), max_size=3))
def test_parse_serde_arg_round_trips_json_objects(options: dict[str, Any]) -> None:
    config = {"type": "x", **options}
    assert parse_serde_arg(json.dumps(config)) == config


def test_validation_uses_the_registry_messages() -> None:
    validate_serde_config({"type": "identity", "max_workers": 2})
    with pytest.raises(BenchInputError, match="'max_workers' must be an integer"):
        validate_serde_config({"type": "identity", "max_workers": "2"})
    with pytest.raises(BenchInputError, match="Unknown serde type 'nope'. Registered: .*identity"):
        validate_serde_config({"type": "nope"})
    with pytest.raises(BenchInputError, match="Unknown option 'maxworkers'.*Did you mean 'max_workers'"):
        validate_serde_config([{"type": "identity"}, {"type": "identity", "maxworkers": 1}])


def test_labels() -> None:
    assert label_for({"type": "fp8"}) == "fp8"
    assert label_for({"type": "turboquant", "preset": "turboquant_4bit_nc"}) == "turboquant:4bit_nc"
    assert label_for({"type": "fp8", "scaling": "per_token"}) == "fp8:per_token"
    assert label_for({"type": "fp8", "fp8_dtype": "float8_e5m2"}) == "fp8(fp8_dtype=e5m2)"
    assert label_for([{"type": "fp8"}, {"type": "aesgcm", "aes_bits": 256}]) == "fp8+aesgcm(aes_bits=256)"
    serdes = unique_labels([BenchSerde("fp8", {"type": "fp8"}), BenchSerde("fp8", {"type": "fp8"})])
    assert [s.label for s in serdes] == ["fp8", "fp8#2"]


def test_defaults_expand_turboquant_presets_run_split_tier_and_skip_broken(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    infos = [
        SerdeInfo("fp8", "lmserde-fp8", "0.1", "available", ""),
        SerdeInfo("turboquant", "lmserde-turboquant", "0.1", "available", ""),
        SerdeInfo("asym_k16_v8_v_only", "lmserde-asym-k16-v8", "0.1", "available", ""),
        SerdeInfo("broken", "acme", "1.0", "failed", "", error="ImportError: no"),
        SerdeInfo("identity", "lmserde", "0.1", "available", ""),
    ]
    def known(value: str) -> None:
        if value not in ("turboquant_k8v4", "turboquant_4bit_nc", "turboquant_3bit_nc", "tq4"):
            raise ValueError(f"Unsupported TurboQuant preset: {value!r}")

    presets = SerdeOption("preset", str, "turboquant_k8v4", check=known)
    pair = IDENTITY_SPEC.pair_factory
    specs = {"turboquant": SerdeSpec(pair_factory=pair, options=(presets,)),
             "fp8": SerdeSpec(pair_factory=pair, options=())}  # an fp8 without 'scaling'
    monkeypatch.setattr(serde_selection, "list_serdes", lambda: infos)
    monkeypatch.setattr(serde_selection, "get_serde_spec", lambda name: specs.get(name, IDENTITY_SPEC))
    serdes, notes = default_serdes()
    assert [s.label for s in serdes] == ["identity", "fp8", "turboquant:k8v4", "turboquant:4bit_nc",
                                         "turboquant:3bit_nc",  # "tq4" is not asked for
                                         "asym_k16_v8_v_only"]  # split-tier runs too
    assert serdes[2].config == {"type": "turboquant", "preset": "turboquant_k8v4"}
    assert all(s.default for s in serdes)
    assert not any(n.startswith("asym_k16_v8_v_only") for n in notes)
    assert any(n.startswith("broken: not run (ImportError: no)") for n in notes)


def test_default_chains_run_when_every_stage_is_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    with_zstd = [SerdeInfo("identity", "lmserde", "0.1", "available", ""),
                 SerdeInfo("fp8", "lmserde-fp8", "0.1", "available", ""),
                 SerdeInfo("zstd", "lmserde-zstd", "0.1", "available", "")]
    monkeypatch.setattr(serde_selection, "get_serde_spec", lambda name: IDENTITY_SPEC)
    monkeypatch.setattr(serde_selection, "list_serdes", lambda: with_zstd)
    serdes, _ = default_serdes()
    assert [s.label for s in serdes] == ["identity", "fp8", "zstd", "fp8+zstd"]
    assert serdes[-1].config == [{"type": "fp8"}, {"type": "zstd"}] and serdes[-1].default
    broken_zstd = [*with_zstd[:2], SerdeInfo("zstd", "lmserde-zstd", "0.1", "failed", "",
                                             error="ImportError: no blosc2")]
    monkeypatch.setattr(serde_selection, "list_serdes", lambda: broken_zstd)
    serdes, notes = default_serdes()
    assert [s.label for s in serdes] == ["identity", "fp8"]
    assert any(n.startswith("zstd: not run (ImportError") for n in notes)


def test_complete_config_fills_only_what_the_serde_declares(
    tmp_path: Path, test_serdes: Callable[..., None]
) -> None:
    test_serdes("bench_options")
    ctx = RunContext(workdir=tmp_path, head_dim=64, workers=3, reduced_layers=True)
    completed = complete_config({"type": "bench_options", "head_dim": 32}, ctx)
    assert completed["max_workers"] == 3 and completed["head_dim"] == 32  # user value kept
    assert completed["skip_first_layers"] == 0 and completed["skip_last_layers"] == 0
    key = Path(completed["master_key_path"])
    assert key.parent == tmp_path and len(key.read_bytes()) == 32
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o600
    assert len(ctx.notes) == 2
    keyring = complete_config({"type": "bench_options", "key_provider": "keyring"}, ctx)
    assert "master_key_path" not in keyring  # only hkdf gets a throwaway key
    assert complete_config({"type": "identity"}, ctx) == {"type": "identity", "max_workers": 3}
    chain = complete_config([{"type": "identity"}, {"type": "identity", "max_workers": 1}], ctx)
    assert chain == [{"type": "identity", "max_workers": 3}, {"type": "identity", "max_workers": 1}]


def test_adapter_arguments(tmp_path: Path) -> None:
    assert parse_adapter_arg("memory") == {"type": "memory"}
    assert parse_adapter_arg('{"type": "fs", "base_path": "/x"}') == {"type": "fs", "base_path": "/x"}
    validate_adapter_spec({"type": "fs"})  # base_path is filled in per run
    validate_adapter_spec({"type": "fs", "base_path": str(tmp_path), "io_workers": 4})
    with pytest.raises(BenchInputError, match="needs a 'type' field"):
        validate_adapter_spec({"base_path": "/x"})
    completed = complete_adapter_spec({"type": "fs"}, tmp_path)
    assert completed == {"type": "fs", "base_path": str(tmp_path / "l2")}
    assert (tmp_path / "l2").is_dir()
    assert complete_adapter_spec({"type": "memory"}, tmp_path) == {"type": "memory"}
    given_path = {"type": "fs", "base_path": "/data/kv"}
    assert complete_adapter_spec(given_path, tmp_path) == given_path


@pytest.fixture(scope="module")
def chunks() -> list[Any]:
    gen = SyntheticKVGenerator(get_model_shape("tiny"), seed=2)
    return [gen.chunk(i) for i in range(2)]


def test_chunk_objects_in_both_forms(chunks: list[Any], test_serdes: Callable[..., None]) -> None:
    test_serdes("bench_kvgroups")
    chunk = chunks[0]
    single = make_object(chunk, ChunkForm.SINGLE)
    L, T, H, D = chunk.keys.shape
    assert single.get_shapes() == [torch.Size([2, L, T, H * D])]
    assert torch.equal(single.get_tensor(0), chunk.fused())
    groups = make_object(chunk, ChunkForm.KV_GROUPS)
    assert groups.get_shapes() == [torch.Size([L, T, H * D])] * 2
    for obj, form in ((single, ChunkForm.SINGLE), (groups, ChunkForm.KV_GROUPS)):
        k, v = read_kv(obj, form, H)
        assert torch.equal(k, chunk.keys) and torch.equal(v, chunk.values)
    with create_serde_processor(SerdeConfig("identity")) as proc:
        assert chunk_form(proc) is ChunkForm.SINGLE
        assert serialized_capacity(proc, single.get_layout(), ChunkForm.SINGLE) == chunk.nbytes
    with create_serde_processor(SerdeConfig("bench_kvgroups")) as proc:
        assert chunk_form(proc) is ChunkForm.KV_GROUPS
        assert serialized_capacity(proc, groups.get_layout(), ChunkForm.KV_GROUPS) == chunk.nbytes


def _codec(name: str, chunks: list[Any], form: ChunkForm, repeat: int = 2,
           min_seconds: float = 0.0) -> Any:
    sources = [make_object(c, form) for c in chunks]
    outputs = [TensorMemoryObj.allocate(s.get_layout(), zero=True) for s in sources]
    keys = [ObjectKey(ObjectKey.IntHash2Bytes(i), "t", 0) for i in range(len(chunks))]
    steps: list[int] = []
    with create_serde_processor(SerdeConfig(name)) as proc:
        timing = measure_codec(proc, form, sources, outputs, keys, repeat,
                               on_step=lambda: steps.append(1), min_seconds=min_seconds)
    return timing, outputs, len(steps)


def test_codec_timing_round_trips_and_reports_sizes(
    chunks: list[Any], test_serdes: Callable[..., None]
) -> None:
    test_serdes("bench_upper", "bench_kvgroups")
    timing, outputs, steps = _codec("bench_upper", chunks, ChunkForm.SINGLE)
    assert steps == 4 and len(timing.encode_seconds) == len(timing.decode_seconds) == 2
    assert all(s > 0 for s in timing.encode_seconds + timing.decode_seconds)
    assert timing.stored_bytes == [c.nbytes + 4 for c in chunks]
    assert timing.capacity_bytes == chunks[0].nbytes + 64
    for chunk, out in zip(chunks, outputs):
        assert torch.equal(out.get_tensor(0), chunk.fused())
    timing, outputs, _ = _codec("bench_kvgroups", chunks, ChunkForm.KV_GROUPS, repeat=1)
    for chunk, out in zip(chunks, outputs):
        k, v = read_kv(out, ChunkForm.KV_GROUPS, chunk.num_heads)
        assert torch.equal(k, chunk.keys) and torch.equal(v, chunk.values)


def test_fast_codecs_get_more_rounds_up_to_the_cap(chunks: list[Any]) -> None:
    timing, _, steps = _codec("identity", chunks, ChunkForm.SINGLE, repeat=1, min_seconds=1e9)
    assert len(timing.encode_seconds) == len(timing.decode_seconds) == 50  # capped
    assert steps == 2  # progress counts the requested repeats only


def test_codec_failure_carries_the_serde_error(chunks: list[Any], test_serdes: Callable[..., None]) -> None:
    test_serdes("bench_broken")
    with pytest.raises(SerdeTaskError, match="bench_broken serialize failed: ValueError: bench_broken"):
        _codec("bench_broken", chunks, ChunkForm.SINGLE)


def test_data_path_through_memory_and_fault_adapters(chunks: list[Any]) -> None:
    steps: list[int] = []
    result = run_data_path({"type": "memory"}, {"type": "identity"}, chunks, ChunkForm.SINGLE, 2,
                           on_step=lambda: steps.append(1))
    assert len(steps) == 2 * 2 * len(chunks)
    assert len(result.store_seconds) == len(result.load_seconds) == 2 * len(chunks)
    # identity payload behind the stored-object frame header
    assert result.stored_bytes == [c.nbytes + FRAME_HEADER_BYTES for c in chunks]
    for chunk, (k, v) in zip(chunks, result.decoded):
        assert torch.equal(k, chunk.keys) and torch.equal(v, chunk.values)
    assert set(result.stage_p50_seconds) == {"serialize", "inner_store", "inner_load", "deserialize"}
    fault = {"type": "fault", "inner": {"type": "memory"}, "store_failure_rate": 1.0}
    with pytest.raises(DataPathError, match="store through the fault adapter failed"):
        run_data_path(fault, {"type": "identity"}, chunks, ChunkForm.SINGLE, 1)
