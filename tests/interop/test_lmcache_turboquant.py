"""LMCache 0.5.6's own TurboQuant serde (its Triton kernels, in Triton's interpreter on the CPU)
against lmserde's ``turboquant`` serde, for LMCache's four presets.

LMCache's ``TurboQuantSerializer`` and ``TurboQuantDeserializer`` run unmodified, with the runtime
patches of ``lmcache_triton_cpu`` (interpreted kernels, CPU staging, e4m3 fp8 flavour, GPU-exact
fp8 rounding).
Checked per preset on bf16, fp16 and float32 tensors, head sizes 64 and 128, default and zero
skipped layers, keys with outlier channels and keys placed on codebook boundaries:

* the streams are byte-identical except (a) slots of padding tokens, which LMCache never writes
  (its destination is ``torch.empty``; ours are zero), and (b) MSE key indices of coordinates
  that lie within float32 rounding of a codebook boundary, and fp16 norms within one fp16 ulp:
  each such difference is checked to be one of those, and counted; (c) a value vector whose
  minimum is -0.0: LMCache stores the fp16 zero as -0.0, the format as +0.0;
* LMCache's deserializer reads our bytes, and ours reads LMCache's; the difference between the two
  decoders on the same bytes is bounded by LMCache's fp16 intermediate buffers.

The interpreter is slow (about 20-40 ms per program instance), so the tensors are small; every
LMCache call of a case is made once (module-scoped cache) and shared by the tests of that case.
"""

from __future__ import annotations

import math
import warnings
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import pytest

pytest.importorskip("lmcache", reason="the interop session installs lmcache==0.5.6")
pytest.importorskip("triton", reason="the interop session installs triton")
pytest.importorskip("lmserde_turboquant")

import torch
from lmcache_triton_cpu import lmcache_turboquant_on_cpu
from lmserde import ObjectKey, SerdeConfig, TensorMemoryObj, create_serde_processor
from lmserde_turboquant import LMCACHE_PRESET_NAMES, AllRawLayoutWarning
from lmserde_turboquant.bitpack import unpack_indices

KEY = ObjectKey(chunk_hash=bytes(32), model_name="acme/llm", kv_rank=0)


@dataclass(frozen=True)
class Case:
    """One KV tensor ``[2, layers, tokens, heads * head_dim]`` and the serde options."""

    name: str
    dtype: torch.dtype
    head_dim: int
    heads: int
    layers: int
    tokens: int
    skips: tuple[int, int]
    keys: str  # "normal", "outliers" or "boundary"

    @property
    def shape(self) -> list[int]:
        return [2, self.layers, self.tokens, self.heads * self.head_dim]


CASES = [
    # default skips (2, 2): layers 0, 1, 3, 4 raw; 20 tokens -> 12 padding tokens in block 2
    Case("bf16-d128-skip2-padded", torch.bfloat16, 128, 2, 5, 20, (2, 2), "normal"),
    Case("fp16-d64-noskip", torch.float16, 64, 2, 2, 16, (0, 0), "normal"),
    # 4 of 128 channels 20x larger in every key, as rotary-embedded keys of real models have
    Case("bf16-d128-outlier-keys", torch.bfloat16, 128, 1, 1, 16, (0, 0), "outliers"),
    # 16 of 128 rotated coordinates of every key exactly on a codebook boundary (float32 input)
    Case("fp32-d128-boundary-keys", torch.float32, 128, 1, 1, 16, (0, 0), "boundary"),
]
BLOCK_SIZE = 16


def _kv(case: Case, preset: str, lmc: ModuleType) -> torch.Tensor:
    gen = torch.Generator().manual_seed(zlib.crc32(f"{case.name}/{preset}".encode()))
    kv = torch.randn(case.shape, generator=gen)
    kv[1] += 0.3  # values with a common offset
    k = kv[0].view(case.layers, case.tokens, case.heads, case.head_dim)
    if case.keys == "outliers":
        k[..., [3, 40, 77, 120]] *= 20.0
    elif case.keys == "boundary":
        k.copy_(_keys_on_boundaries(case, preset, lmc, gen))
    return kv.to(case.dtype)


def _keys_on_boundaries(case: Case, preset: str, lmc: ModuleType,
                        gen: torch.Generator) -> torch.Tensor:
    """Keys whose unit-norm rotation has 16 coordinates exactly (in float64) on a boundary."""
    cfg = _their_config(case, preset, lmc)
    bits = cfg.key_mse_bits or 4
    mids = lmc._solve_lloyd_max(case.head_dim, bits)[1].double()
    out = torch.empty(case.layers, case.tokens, case.heads, case.head_dim, dtype=torch.float64)
    for layer in range(case.layers):
        pi_t = lmc._make_tq_tensors_for_layer(
            lmc.TurboQuantSerdeConfig(head_dim=case.head_dim), layer, torch.device("cpu"))[0]
        for t in range(case.tokens):
            for h in range(case.heads):
                y = torch.randn(case.head_dim, generator=gen, dtype=torch.float64)
                pick = torch.randperm(case.head_dim, generator=gen)[:16]
                on = mids[torch.randint(0, len(mids), (16,), generator=gen)]
                rest = torch.ones(case.head_dim, dtype=torch.bool)
                rest[pick] = False
                y[rest] *= math.sqrt(max(1.0 - float((on * on).sum()), 0.0)
                                     / float((y[rest] * y[rest]).sum()))
                y[pick] = on
                out[layer, t, h] = 3.0 * (pi_t.double() @ y)  # unit y -> norm-3 key
    return out.float()


def _their_config(case: Case, preset: str, lmc: ModuleType) -> Any:
    return lmc.TurboQuantSerdeConfig(preset=preset, head_dim=case.head_dim, block_size=BLOCK_SIZE,
                                     skip_first_layers=case.skips[0],
                                     skip_last_layers=case.skips[1])


@dataclass
class Run:
    """Everything both implementations produced for one (case, preset)."""

    kv: torch.Tensor
    theirs: torch.Tensor  # LMCache's serialized bytes
    ours: torch.Tensor  # lmserde's serialized bytes
    theirs_of_ours: torch.Tensor  # LMCache's decoding of our bytes
    ours_of_ours: torch.Tensor
    ours_of_theirs: torch.Tensor
    y_theirs: list[torch.Tensor]  # per quantized layer: the rotated unit keys LMCache bucketed
    norms_theirs: list[torch.Tensor]  # per quantized layer: the key norms LMCache stored


@pytest.fixture(scope="module")
def lmc() -> Iterator[ModuleType]:
    with lmcache_turboquant_on_cpu() as module:
        yield module


@pytest.fixture(scope="module")
def runs(lmc: ModuleType) -> Iterator[Any]:
    cache: dict[tuple[str, str], Run] = {}

    def get(case: Case, preset: str) -> Run:
        if (case.name, preset) not in cache:
            cache[case.name, preset] = _run(case, preset, lmc)
        return cache[case.name, preset]

    yield get


def _run(case: Case, preset: str, lmc: ModuleType) -> Run:
    cfg = _their_config(case, preset, lmc)
    kv = _kv(case, preset, lmc)
    n = lmc._serialized_nbytes_for_shape(kv.shape, kv.dtype, cfg)
    theirs = torch.empty(n, dtype=torch.uint8)
    assert lmc.TurboQuantSerializer(cfg).serialize(
        TensorMemoryObj.from_tensor(kv), TensorMemoryObj.from_tensor(theirs), KEY) == n
    theirs_of_ours = torch.zeros_like(kv)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AllRawLayoutWarning)
        processor = create_serde_processor(SerdeConfig("turboquant", {
            "preset": preset, "head_dim": case.head_dim, "block_size": BLOCK_SIZE,
            "skip_first_layers": case.skips[0], "skip_last_layers": case.skips[1]}))
    try:
        ours = torch.full((n,), 0xA5, dtype=torch.uint8)
        assert processor.serializer.serialize(
            TensorMemoryObj.from_tensor(kv), TensorMemoryObj.from_tensor(ours), KEY) == n
        ours_of_ours, ours_of_theirs = torch.zeros_like(kv), torch.zeros_like(kv)
        for src, dst in ((ours, ours_of_ours), (theirs, ours_of_theirs)):
            processor.deserializer.deserialize(TensorMemoryObj.from_tensor(src),
                                               TensorMemoryObj.from_tensor(dst), KEY)
    finally:
        processor.close()
    lmc.TurboQuantDeserializer(cfg).deserialize(
        TensorMemoryObj.from_tensor(ours), TensorMemoryObj.from_tensor(theirs_of_ours), KEY)
    start, end = lmc._layer_ranges(case.layers, cfg)
    y_theirs, norms_theirs = [], []
    for layer in range(start, end):
        y, norms = _lmcache_rotated_keys(kv[0, layer], case.head_dim, cfg, layer, lmc)
        y_theirs.append(y.view(case.tokens, case.heads, -1))
        norms_theirs.append(norms.view(case.tokens, case.heads))
    return Run(kv, theirs, ours, theirs_of_ours, ours_of_ours, ours_of_theirs, y_theirs,
               norms_theirs)


def _lmcache_rotated_keys(k: torch.Tensor, d: int, cfg: Any, layer: int, lmc: ModuleType,
                          ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(y, norms)`` exactly as LMCache's store launcher computes them (torch, on this CPU)."""
    k = k.float().reshape(-1, d)
    norms = k.norm(dim=1, keepdim=True)
    pi_t = lmc._make_tq_tensors_for_layer(cfg, layer, torch.device("cpu"))[0]
    return k / (norms + 1e-8) @ pi_t, norms.squeeze(1)


def _slots(buf: torch.Tensor, case: Case, cfg: Any, lmc: ModuleType,
           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(first raw bytes, slots ``[Lq, blocks * block_size, H, slot]``, last raw bytes)."""
    start, end = lmc._layer_ranges(case.layers, cfg)
    first = lmc._raw_group_nbytes(torch.Size(case.shape), case.dtype, start)
    shape = lmc._compressed_layout_for_shape(torch.Size(case.shape), cfg, end - start)
    mid = math.prod(shape)
    slots = buf[first:first + mid].view(shape[0], shape[1] * shape[2], shape[3], shape[4])
    return buf[:first], slots, buf[first + mid:]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
@pytest.mark.parametrize("preset", LMCACHE_PRESET_NAMES)
def test_bytes_equal_lmcache_kernels_except_boundary_keys(runs: Any, lmc: ModuleType,
                                                          case: Case, preset: str) -> None:
    run = runs(case, preset)
    cfg = _their_config(case, preset, lmc)
    (f_t, s_t, l_t), (f_o, s_o, l_o) = (_slots(b, case, cfg, lmc) for b in (run.theirs, run.ours))
    assert torch.equal(f_t, f_o) and torch.equal(l_t, l_o)  # raw layers: the same bytes
    # (a) padding-token slots: LMCache leaves them as torch.empty gave them, ours are zero
    assert not s_o[:, case.tokens:].any()
    s_t, s_o = s_t[:, :case.tokens, :, :cfg.slot_size], s_o[:, :case.tokens, :, :cfg.slot_size]
    kps = cfg.key_packed_size
    assert torch.equal(s_t[..., kps:], s_o[..., kps:])  # value parts: identical
    if cfg.key_fp8:
        assert torch.equal(s_t, s_o)
        print(f"\n{case.name} {preset}: 0 differing bytes of {s_o.numel()} slot bytes")
        return
    # (b) MSE keys: LMCache's indices are its bucketing of its own rotated keys ...
    bits, d = cfg.key_mse_bits, case.head_dim
    mse = math.ceil(d * bits / 8)
    mids = lmc._solve_lloyd_max(d, bits)[1]
    idx_t = unpack_indices(s_t[..., :mse].reshape(-1, mse), bits, d).view(*s_t.shape[:3], d)
    idx_o = unpack_indices(s_o[..., :mse].reshape(-1, mse), bits, d).view(*s_o.shape[:3], d)
    y = torch.stack(run.y_theirs)
    assert torch.equal(idx_t.long(), torch.bucketize(y, mids, right=True))
    # ... and ours differ from them only by one level, where y is within float32 rounding of the
    # boundary between the two levels
    moved = idx_t != idx_o
    assert ((idx_t.long() - idx_o.long()).abs() <= 1).all()
    boundary = mids[torch.minimum(idx_t, idx_o).long()[moved]]
    assert ((y[moved] - boundary).abs() <= 4e-7).all()
    # counted: at most the 16 of 128 coordinates placed on a boundary, else 1 in 1000
    assert moved.float().mean() <= (16 / 128 if case.keys == "boundary" else 1e-3)
    # fp16 norms: equal or one fp16 ulp apart (torch's norm vs the format's fold sum)
    norm_t = s_t[..., mse:mse + 2].contiguous().view(torch.int16).int()
    norm_o = s_o[..., mse:mse + 2].contiguous().view(torch.int16).int()
    assert ((norm_t - norm_o).abs() <= 1).all()
    # LMCache's stored norm is its torch norm rounded to fp16 (used by the large-sample test)
    norms = torch.stack(run.norms_theirs).unsqueeze(-1)
    assert torch.equal(norm_t, norms.half().view(torch.int16).int())
    differing = int((s_t != s_o).sum())
    gap = float((y[moved] - boundary).abs().max()) if moved.any() else 0.0
    print(f"\n{case.name} {preset}: {differing} differing bytes of {s_o.numel()} slot bytes; "
          f"{int(moved.sum())} of {moved.numel()} key indices moved across a boundary "
          f"(max |y - boundary| {gap:.2g}), "
          f"{int((norm_t != norm_o).sum())} of {norm_t.numel()} norms one fp16 ulp apart")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
@pytest.mark.parametrize("preset", LMCACHE_PRESET_NAMES)
def test_each_side_decodes_the_others_bytes(runs: Any, lmc: ModuleType, case: Case,
                                            preset: str) -> None:
    run = runs(case, preset)
    cfg = _their_config(case, preset, lmc)
    start, end = lmc._layer_ranges(case.layers, cfg)
    raw = [i for i in range(case.layers) if not start <= i < end]
    for decoded in (run.theirs_of_ours, run.ours_of_theirs, run.ours_of_ours):
        assert torch.equal(decoded[:, raw], run.kv[:, raw])  # raw layers: bit-exact
    # Ours reading LMCache's bytes: bit-identical wherever the slot bytes are identical, and
    # as accurate as reading our own bytes.
    slots_t, slots_o = _slots(run.theirs, case, cfg, lmc)[1], _slots(run.ours, case, cfg, lmc)[1]
    same = (slots_t == slots_o)[:, :case.tokens, :, :cfg.slot_size].all(dim=-1)
    both = run.ours_of_theirs[:, start:end].view(2, end - start, case.tokens, case.heads, -1)
    own = run.ours_of_ours[:, start:end].view(2, end - start, case.tokens, case.heads, -1)
    assert torch.equal(both[:, same], own[:, same])
    x = run.kv[:, start:end].float().view(2, end - start, case.tokens, case.heads, -1)
    err_theirs = float((both.float() - x).norm() / x.norm())
    err_own = float((own.float() - x).norm() / x.norm())
    assert err_theirs == pytest.approx(err_own, rel=0.01)
    # LMCache reading our bytes: ours up to its fp16 intermediate buffers (keys in the rotated
    # domain, values after dequantisation) and its rounding of fp16 to the destination dtype.
    diff = _decode_difference(run.theirs_of_ours[:, start:end], run.ours_of_ours[:, start:end],
                              case.dtype, cfg.key_fp8, case.head_dim)
    print(f"\n{case.name} {preset}: LMCache vs lmserde decoding of the same bytes: {diff}")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("preset", ["turboquant_4bit_nc", "turboquant_3bit_nc"])
def test_key_bytes_on_20000_vectors(lmc: ModuleType, preset: str, dtype: torch.dtype) -> None:
    """How often float32 rounding moves a key index or norm, on 20,000 random keys per case.

    Too many for the interpreter, so LMCache's side is its launcher's torch arithmetic (norm,
    division, ``x_hat @ PiT`` with its own tables) followed by the bucketing and fp16 rounding its
    kernel applies; the interpreted tests above assert that the kernel's bytes are exactly that.
    """
    layers, tokens, heads, d = 4, 2500, 2, 128
    cfg = lmc.TurboQuantSerdeConfig(preset=preset, head_dim=d, skip_first_layers=0,
                                    skip_last_layers=0)
    gen = torch.Generator().manual_seed(7)
    kv = (torch.randn(2, layers, tokens, heads * d, generator=gen) * 2).to(dtype)
    n = lmc._serialized_nbytes_for_shape(kv.shape, kv.dtype, cfg)
    ours = torch.empty(n, dtype=torch.uint8)
    processor = create_serde_processor(SerdeConfig("turboquant", {
        "preset": preset, "head_dim": d, "skip_first_layers": 0, "skip_last_layers": 0}))
    try:
        processor.serializer.serialize(TensorMemoryObj.from_tensor(kv),
                                       TensorMemoryObj.from_tensor(ours), KEY)
    finally:
        processor.close()
    bits = cfg.key_mse_bits
    mse = d * bits // 8
    mids = lmc._solve_lloyd_max(d, bits)[1]
    slots = ours.view(layers, -1, cfg.slot_size_aligned)[:, : tokens * heads]
    moved = norms_off = 0
    for layer in range(layers):
        y, norms = _lmcache_rotated_keys(kv[0, layer], d, cfg, layer, lmc)
        idx_t = torch.bucketize(y, mids, right=True)
        idx_o = unpack_indices(slots[layer, :, :mse].contiguous(), bits, d).long()
        differ = idx_t != idx_o
        assert ((idx_t - idx_o).abs() <= 1).all()
        boundary = mids[torch.minimum(idx_t, idx_o)[differ]]
        assert ((y[differ] - boundary).abs() <= 4e-7).all()
        norm_o = slots[layer, :, mse:mse + 2].contiguous().view(torch.int16).int().squeeze(1)
        norm_t = norms.half().view(torch.int16).int()
        assert ((norm_t - norm_o).abs() <= 1).all()
        moved += int(differ.sum())
        norms_off += int((norm_t != norm_o).sum())
    vectors = layers * tokens * heads
    print(f"\n{preset} {dtype}: {moved} of {vectors * d} key indices moved across a boundary, "
          f"{norms_off} of {vectors} norms one fp16 ulp apart")
    assert moved <= vectors * d * 1e-5
    assert norms_off <= vectors * 1e-3


def _decode_difference(theirs: torch.Tensor, ours: torch.Tensor, dtype: torch.dtype,
                       key_fp8: bool, d: int) -> dict[str, float]:
    """Assert the documented bounds on LMCache's vs our decoding; return the measured numbers."""
    eps_dst = torch.finfo(dtype).eps
    t, o = theirs.float(), ours.float()
    stats: dict[str, float] = {}
    for name, i in (("K", 0), ("V", 1)):
        diff = (t[i] - o[i]).abs()
        stats[f"{name} rel L2"] = float(diff.norm() / o[i].norm())
        stats[f"{name} max abs"] = float(diff.max())
        stats[f"{name} equal"] = float((t[i] == o[i]).float().mean())
    # values: LMCache rounds code * scale + zero to fp16, then to the destination dtype
    dv = (t[1] - o[1]).abs()
    assert (dv <= o[1].abs() * (2.0**-11 + eps_dst) + 2.0**-24).all()
    if dtype == torch.float16:
        assert torch.equal(t[1], o[1])  # same float32 value, the same single rounding
    if key_fp8:
        assert torch.equal(t[0], o[0])  # e4m3 values are exact in fp16, bf16 and float32
    else:
        # keys: fp16 rounding of norm * centroid in the rotated domain (relative 2^-11 per
        # coordinate, so at most 2^-11 of the row norm after the orthogonal rotation), then an
        # fp16 rounding of the unrotated key and the destination rounding
        rows_t, rows_o = t[0].reshape(-1, d), o[0].reshape(-1, d)
        row_err = (rows_t - rows_o).norm(dim=1)
        bound = rows_o.norm(dim=1) * (2.0**-11 + 2.0**-11 + eps_dst) * 1.01 + d * 2.0**-24
        assert (row_err <= bound).all()
        stats["K max row err / row norm"] = float((row_err / rows_o.norm(dim=1)).max())
    return {k: round(v, 7) for k, v in stats.items()}


def test_a_negative_zero_minimum_is_the_one_value_byte_that_differs(lmc: ModuleType) -> None:
    """Exception (c): a value vector whose minimum is -0.0 (no negative entry) gets zero = -0.0
    (fp16 0x8000) from LMCache and +0.0 from lmserde (the format stores ``min + 0``); the two
    decode to equal floats."""
    cfg = lmc.TurboQuantSerdeConfig(preset="turboquant_k8v4", head_dim=64, skip_first_layers=0,
                                    skip_last_layers=0)
    kv = torch.rand(2, 1, BLOCK_SIZE, 64, generator=torch.Generator().manual_seed(3)) + 0.5
    kv[1, 0, 1:, 5] = -0.0  # tokens 1..15: minimum -0.0; token 0: minimum positive
    kv = kv.half()
    n = lmc._serialized_nbytes_for_shape(kv.shape, kv.dtype, cfg)
    theirs, ours = torch.empty(n, dtype=torch.uint8), torch.empty(n, dtype=torch.uint8)
    lmc.TurboQuantSerializer(cfg).serialize(TensorMemoryObj.from_tensor(kv),
                                            TensorMemoryObj.from_tensor(theirs), KEY)
    processor = create_serde_processor(SerdeConfig("turboquant", {
        "preset": "turboquant_k8v4", "head_dim": 64, "skip_first_layers": 0,
        "skip_last_layers": 0}))
    try:
        processor.serializer.serialize(TensorMemoryObj.from_tensor(kv),
                                       TensorMemoryObj.from_tensor(ours), KEY)
        decoded, mine = torch.empty_like(kv), torch.empty_like(kv)
        for src, dst in ((theirs, decoded), (ours, mine)):
            processor.deserializer.deserialize(TensorMemoryObj.from_tensor(src),
                                               TensorMemoryObj.from_tensor(dst), KEY)
    finally:
        processor.close()
    slots_t, slots_o = theirs.view(BLOCK_SIZE, -1), ours.view(BLOCK_SIZE, -1)
    zero_hi = cfg.slot_size - 1  # high byte of the fp16 zero, the slot's last byte
    assert torch.equal(slots_t[0], slots_o[0])
    assert (slots_t[1:, zero_hi] == 0x80).all() and (slots_o[1:, zero_hi] == 0).all()
    slots_t[1:, zero_hi] = 0
    assert torch.equal(slots_t, slots_o)
    assert torch.equal(decoded, mine)  # -0.0 == +0.0, and code * scale + zero is the same float


@pytest.mark.parametrize("preset", ["turboquant_k8v4", "turboquant_3bit_nc"])
def test_lmcache_kernels_leave_padding_slots_unwritten(lmc: ModuleType, preset: str) -> None:
    """The reason for exception (a): LMCache's store kernel writes only the tokens' slots."""
    from lmcache.v1.distributed.serde.turboquant.store_kernel import triton_turboquant_store

    cfg = lmc.TurboQuantSerdeConfig(preset=preset, head_dim=64, block_size=BLOCK_SIZE)
    tokens, heads = 3, 1
    cache = torch.full((1, BLOCK_SIZE, heads, cfg.slot_size_aligned), 0xA5, dtype=torch.uint8)
    k, v = torch.randn(2, tokens, heads, 64, generator=torch.Generator().manual_seed(5))
    pi_t, mids, _ = lmc._make_tq_tensors_for_layer(cfg, 2, torch.device("cpu"))
    triton_turboquant_store(k.half(), v.half(), cache, torch.arange(tokens, dtype=torch.int32),
                            pi_t, mids, mse_bits=cfg.key_mse_bits,
                            key_packed_size=cfg.key_packed_size,
                            value_quant_bits=cfg.value_quant_bits, key_fp8=cfg.key_fp8)
    assert (cache[0, tokens:] == 0xA5).all()
    assert (cache[0, :tokens] != 0xA5).any()


def test_fp8_patch_matches_a_correctly_rounded_saturating_cast(lmc: ModuleType) -> None:
    """Patch 4 of ``lmcache_triton_cpu`` gives LMCache's k8v4 kernel GPU fp8 bytes on edge values.

    Rounding ties to even, saturation of finite and infinite values at +-448, subnormals and
    NaN, through LMCache's own store kernel; the expected bytes are the PTX ``cvt.rn.satfinite``
    semantics written out: nearest e4m3 value, ties to the even code, |x| > 448 -> 448.
    """
    from lmcache.v1.distributed.serde.turboquant.store_kernel import triton_turboquant_store

    cfg = lmc.TurboQuantSerdeConfig(preset="turboquant_k8v4", head_dim=16, block_size=1)
    grid = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    finite = grid[torch.isfinite(grid)]
    pos = finite[finite > 0].unique()
    edges = [1.0625, 1.1875, 464.0, 500.0, 1e4, float("inf"), -float("inf"), -460.0,
             2.0**-10, 2.0**-10 * 1.5, 2.0**-11, 2.0**-12, float("nan"), 0.0, -0.0, 3.0]
    k = torch.tensor(edges, dtype=torch.float16).view(1, 1, 16)
    v = torch.zeros_like(k)
    cache = torch.zeros((1, 1, 1, cfg.slot_size_aligned), dtype=torch.uint8)
    pi_t, mids, _ = lmc._make_tq_tensors_for_layer(cfg, 0, torch.device("cpu"))
    triton_turboquant_store(k, v, cache, torch.zeros(1, dtype=torch.int32), pi_t, mids,
                            mse_bits=0, key_packed_size=cfg.key_packed_size,
                            value_quant_bits=cfg.value_quant_bits, key_fp8=True)
    got = cache[0, 0, 0, :16]
    for x, code in zip(k.flatten().float().tolist(), got.tolist(), strict=True):
        assert code == _satfinite_e4m3(x, pos), (x, hex(code))


def _satfinite_e4m3(x: float, pos: torch.Tensor) -> int:
    """The e4m3fn code PTX ``cvt.rn.satfinite`` gives ``x`` (spelled out, not torch's cast)."""
    if math.isnan(x):
        return 0x7F
    sign = 0x80 if math.copysign(1.0, x) < 0 else 0
    a = min(abs(x), 448.0)
    values = [0.0, *pos.tolist()]
    best = min(range(len(values)), key=lambda i: (abs(values[i] - a), _odd_code(values[i])))
    mag = torch.tensor(values[best]).to(torch.float8_e4m3fn).view(torch.uint8).item()
    return sign | int(mag)


def _odd_code(value: float) -> int:
    return int(torch.tensor(value).to(torch.float8_e4m3fn).view(torch.uint8).item()) & 1
