"""KV data sources: the synthetic generator (determinism, shapes, statistics) and safetensors files."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from lmserde.bench.kv_chunk import KVChunk, select_layers
from lmserde.bench.kv_files import KVFileSource
from lmserde.bench.kv_generators import SyntheticKVGenerator, _ar1, _rope_tables
from lmserde.bench.model_shapes import BUILTIN_MODELS, ModelShape, get_model_shape


def test_builtin_models_have_the_published_shapes() -> None:
    llama, mistral, qwen = (get_model_shape(n) for n in ("llama-3-8b", "mistral-7b", "qwen2.5-7b"))
    assert (llama.num_layers, llama.num_kv_heads, llama.head_dim) == (32, 8, 128)
    assert (mistral.num_layers, mistral.num_kv_heads, mistral.head_dim) == (32, 8, 128)
    assert (qwen.num_layers, qwen.num_kv_heads, qwen.head_dim) == (28, 4, 128)
    assert all(m.chunk_tokens == 256 for m in (llama, mistral, qwen))
    assert qwen.boundary_offset_layers > 0 and llama.boundary_offset_layers == 0
    with pytest.raises(ValueError, match="unknown model 'gpt'.*llama-3-8b"):
        get_model_shape("gpt")


def test_model_shape_rejects_bad_values() -> None:
    with pytest.raises(ValueError, match="num_layers"):
        ModelShape("x", "", num_layers=0, num_kv_heads=1, head_dim=8, rope_theta=1e4)
    with pytest.raises(ValueError, match="even"):
        ModelShape("x", "", num_layers=1, num_kv_heads=1, head_dim=7, rope_theta=1e4)
    with pytest.raises(ValueError, match="outlier_channels"):
        ModelShape("x", "", num_layers=1, num_kv_heads=1, head_dim=8, rope_theta=1e4,
                   outlier_channels=5)


@given(total=st.integers(1, 80), data=st.data())
def test_select_layers_is_evenly_spaced_distinct_and_keeps_both_ends(total: int, data: st.DataObject) -> None:
    count = data.draw(st.integers(1, total))
    picked = select_layers(total, count)
    assert len(picked) == count and len(set(picked)) == count
    assert list(picked) == sorted(picked) and picked[0] == 0
    if count > 1:
        assert picked[-1] == total - 1


def test_select_layers_rejects_out_of_range_counts() -> None:
    with pytest.raises(ValueError, match=r"\[1, 4\]"):
        select_layers(4, 5)


def test_chunks_are_deterministic_per_seed_and_index() -> None:
    shape = get_model_shape("tiny")
    a = SyntheticKVGenerator(shape, seed=7)
    b = SyntheticKVGenerator(shape, seed=7)
    c = SyntheticKVGenerator(shape, seed=8)
    chunk_a1 = a.chunk(1)
    a.chunk(0)
    assert torch.equal(chunk_a1.keys, b.chunk(1).keys)  # independent of what was generated before
    assert torch.equal(chunk_a1.values, a.chunk(1).values)
    assert not torch.equal(chunk_a1.keys, c.chunk(1).keys)
    assert not torch.equal(chunk_a1.keys, a.chunk(2).keys)
    assert chunk_a1.start_position == shape.chunk_tokens


def test_chunk_shape_dtype_and_layers() -> None:
    shape = get_model_shape("llama-3-8b")
    gen = SyntheticKVGenerator(shape, layers=3, tokens=32, dtype=torch.float16)
    chunk = gen.chunk(0)
    assert chunk.keys.shape == (3, 32, 8, 128) and chunk.dtype == torch.float16
    assert chunk.layer_ids == (0, 16, 31)
    assert chunk.nbytes == gen.chunk_nbytes == 2 * 3 * 32 * 8 * 128 * 2
    fused = chunk.fused()
    assert fused.shape == (2, 3, 32, 1024)
    assert torch.equal(fused[0].view(3, 32, 8, 128), chunk.keys)
    assert torch.equal(fused[1].view(3, 32, 8, 128), chunk.values)
    with pytest.raises(ValueError, match="unsupported KV dtype"):
        SyntheticKVGenerator(shape, dtype=torch.int8)
    with pytest.raises(ValueError, match="chunk index"):
        gen.chunk(-1)


def _unrotate(keys: torch.Tensor, start: int, theta: float) -> torch.Tensor:
    """Undo the rotary embedding of ``[L, T, H, D]`` keys."""
    T, D = keys.shape[1], keys.shape[3]
    cos, sin = _rope_tables(torch.arange(start, start + T), D, theta)
    x = keys.float().permute(0, 2, 1, 3)  # [L, H, T, D]
    half = D // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return (x * cos - rotated * sin).permute(0, 2, 1, 3)  # rotate by the negative angle


def test_keys_have_persistent_outlier_channels_under_rotary_embedding() -> None:
    shape = get_model_shape("llama-3-8b")
    gen = SyntheticKVGenerator(shape, seed=3, layers=2)
    early, late = gen.chunk(0), gen.chunk(400)  # positions 0.. and 102400..

    def corr(a: torch.Tensor, b: torch.Tensor) -> float:
        return float(torch.corrcoef(torch.stack((a.flatten(), b.flatten())))[0, 1])

    # Before RoPE, each channel's mean over a chunk is a model property: the same far apart in the
    # sequence, and large on a few outlier channels.
    mean_early = _unrotate(early.keys, early.start_position, shape.rope_theta).mean(dim=1)
    mean_late = _unrotate(late.keys, late.start_position, shape.rope_theta).mean(dim=1)
    assert corr(mean_early, mean_late) > 0.95
    magnitude = mean_early.abs()
    top = magnitude.topk(2 * shape.outlier_channels, dim=-1).values.mean()
    assert top > 8 * magnitude.median()
    # The stored keys are rotated by position: far apart, their channel means no longer agree.
    assert corr(early.keys.float().mean(dim=1), late.keys.float().mean(dim=1)) < 0.6


def test_values_are_close_to_gaussian_and_grow_with_depth() -> None:
    gen = SyntheticKVGenerator(get_model_shape("mistral-7b"), layers=4)
    v = gen.chunk(0).values.float()
    per_layer_std = v.std(dim=(1, 2, 3))
    assert bool((per_layer_std[1:] > per_layer_std[:-1]).all())
    z = v[2] / v[2].std(dim=0, keepdim=True)  # per (head, channel) standardised
    kurtosis = float((z**4).mean() / (z**2).mean() ** 2)
    assert 2.5 < kurtosis < 4.0  # Gaussian: 3


def test_qwen_boundary_layers_carry_large_key_offsets() -> None:
    shape = get_model_shape("qwen2.5-7b")
    keys = SyntheticKVGenerator(shape, layers=shape.num_layers, tokens=16).chunk(0).keys.float()
    peak = keys.abs().amax(dim=(1, 2, 3))
    boundary = torch.cat((peak[: shape.boundary_offset_layers], peak[-shape.boundary_offset_layers:]))
    middle = peak[shape.boundary_offset_layers: -shape.boundary_offset_layers]
    assert boundary.min() > 1.5 * middle.max()


def test_latent_token_process_is_unit_variance_ar1() -> None:
    torch.manual_seed(0)
    x = _ar1(torch.randn(4000, 96, 1))
    assert torch.allclose(x.var(dim=0).flatten(), torch.ones(96), atol=0.1)
    lag1 = float((x[:, 1:] * x[:, :-1]).mean())
    assert lag1 == pytest.approx(0.7, abs=0.03)


def test_kvchunk_validates_its_tensors() -> None:
    k = torch.zeros(2, 4, 1, 8, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="differ in shape"):
        KVChunk(k, torch.zeros(2, 4, 1, 4, dtype=torch.bfloat16), (0, 1))
    with pytest.raises(ValueError, match="share one dtype"):
        KVChunk(k, k.float(), (0, 1))
    with pytest.raises(ValueError, match="layer ids"):
        KVChunk(k, k.clone(), (0,))
    with pytest.raises(ValueError, match=r"\[layers, tokens, heads, head_dim\]"):
        KVChunk(k[0], k[0].clone(), (0,))


@pytest.fixture
def kv_file(tmp_path: Path) -> tuple[Path, torch.Tensor, torch.Tensor]:
    safetensors = pytest.importorskip("safetensors.torch")
    g = torch.Generator().manual_seed(2)
    keys = torch.randn(6, 50, 2, 8, generator=g).to(torch.bfloat16)
    values = torch.randn(6, 50, 2, 8, generator=g).to(torch.bfloat16)
    path = tmp_path / "kv.safetensors"
    safetensors.save_file({"keys": keys, "values": values, "extra": torch.zeros(1)}, str(path))
    return path, keys, values


def test_kv_file_chunks_are_slices_of_the_file(kv_file: tuple[Path, torch.Tensor, torch.Tensor]) -> None:
    path, keys, values = kv_file
    source = KVFileSource(path, layers=3, tokens=16)
    assert source.layer_ids == (0, 3, 5) and source.num_chunks == 3
    chunk = source.chunk(2)
    assert torch.equal(chunk.keys, keys[[0, 3, 5], 32:48])
    assert torch.equal(chunk.values, values[[0, 3, 5], 32:48])
    assert chunk.start_position == 32
    with pytest.raises(ValueError, match="holds 3 chunk"):
        source.chunk(3)
    whole = KVFileSource(path, layers=100)  # at most: every layer, all 50 tokens in one chunk
    assert whole.layer_ids == tuple(range(6)) and whole.tokens == 50 and whole.num_chunks == 1
    with pytest.raises(ValueError, match=r"tokens per chunk must be in \[1, 50\]"):
        KVFileSource(path, tokens=51)


def test_kv_file_errors_are_clear(tmp_path: Path) -> None:
    safetensors = pytest.importorskip("safetensors.torch")
    with pytest.raises(ValueError, match="not found"):
        KVFileSource(tmp_path / "missing.safetensors")
    bad = tmp_path / "bad.safetensors"
    safetensors.save_file({"k": torch.zeros(1, 2, 1, 4)}, str(bad))
    with pytest.raises(ValueError, match="missing tensor.*keys, values.*found: k"):
        KVFileSource(bad)
    rank3 = tmp_path / "rank3.safetensors"
    safetensors.save_file({"keys": torch.zeros(1, 2, 4), "values": torch.zeros(1, 2, 4)}, str(rank3))
    with pytest.raises(ValueError, match=r"\[layers, tokens, kv_heads, head_dim\]"):
        KVFileSource(rank3)
    mixed = tmp_path / "mixed.safetensors"
    safetensors.save_file({"keys": torch.zeros(1, 2, 1, 4),
                           "values": torch.zeros(1, 2, 1, 4, dtype=torch.float16)}, str(mixed))
    with pytest.raises(ValueError, match="share one dtype"):
        KVFileSource(mixed)
    garbage = tmp_path / "garbage.safetensors"
    garbage.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00not json")
    with pytest.raises(ValueError, match="cannot read as safetensors"):
        KVFileSource(garbage)


def test_kv_file_without_safetensors_says_how_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import lmserde.bench.kv_files as kv_files

    real = kv_files.importlib.import_module

    def no_safetensors(name: str, *args: object) -> object:
        if name == "safetensors":
            raise ImportError("No module named 'safetensors'")
        return real(name, *args)

    monkeypatch.setattr(kv_files.importlib, "import_module", no_safetensors)
    path = tmp_path / "kv.safetensors"
    path.write_bytes(b"x")
    with pytest.raises(ValueError, match=r"needs the 'safetensors' package.*pip install"):
        KVFileSource(path)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**31), name=st.sampled_from(sorted(BUILTIN_MODELS)))
def test_every_model_generates_finite_values_within_bf16_range(seed: int, name: str) -> None:
    chunk = SyntheticKVGenerator(get_model_shape(name), seed=seed, layers=2, tokens=8).chunk(0)
    for t in (chunk.keys, chunk.values):
        assert bool(torch.isfinite(t.float()).all())
        assert float(t.float().abs().max()) < 1e3
    assert not math.isclose(float(chunk.keys.float().std()), 0.0)
