"""Against the real LMCache package (when installed, e.g. in the ``interop`` nox session): its
TurboQuant codebook solver, sign generator, presets, slot sizes and stream sizes equal ours.

LMCache's encode and decode kernels need CUDA and Triton; everything they are parameterised with
is compared here, bit for bit, on the CPU.
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from lmserde_turboquant import LMCACHE_PRESET_NAMES, AllRawLayoutWarning, TurboQuantConfig
from lmserde_turboquant.codebook import lloyd_max_codebook
from lmserde_turboquant.rotation import hadamard_matrix, layer_seed, rotation_signs

lmc = pytest.importorskip("lmcache.v1.distributed.serde.turboquant.turboquant")


@pytest.mark.parametrize("bits", [2, 3, 4])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_codebooks_are_lmcaches_bit_for_bit(head_dim: int, bits: int) -> None:
    centroids, boundaries = lmc._solve_lloyd_max(head_dim, bits)
    ours = lloyd_max_codebook(head_dim, bits, "lmcache")
    assert torch.equal(ours.centroids, centroids)
    assert torch.equal(ours.boundaries, boundaries)


@pytest.mark.parametrize("layer", [0, 1, 2, 17, 63])
def test_signs_are_lmcaches(layer: int) -> None:
    assert lmc._TQ_LAYER_SEED_STRIDE == 1337
    signs = lmc._generate_wht_signs(128, seed=layer_seed(layer), device=torch.device("cpu"))
    assert torch.equal(rotation_signs(128, layer), signs)


def test_hadamard_matrix_is_lmcaches() -> None:
    assert torch.equal(hadamard_matrix(128) / math.sqrt(128), lmc._build_hadamard_cpu(128))


@pytest.mark.parametrize("name", LMCACHE_PRESET_NAMES)
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_presets_and_slot_sizes_are_lmcaches(name: str, head_dim: int) -> None:
    theirs = lmc.TurboQuantSerdeConfig(preset=name, head_dim=head_dim)
    ours = TurboQuantConfig(preset=name, head_dim=head_dim).preset_spec
    assert set(LMCACHE_PRESET_NAMES) == set(lmc.TQ_PRESETS)
    assert ours.key_bits == theirs.key_quant_bits
    assert ours.value_bits == theirs.value_quant_bits
    assert ours.norm_correction == theirs.norm_correction
    assert ours.key_bytes(head_dim) == theirs.key_packed_size
    assert ours.value_bytes(head_dim) == theirs.value_packed_size
    assert ours.slot_stride(head_dim) == theirs.slot_size_aligned


@pytest.mark.parametrize("shape", [[2, 3, 20, 512], [2, 9, 37, 1024], [2, 6, 16, 128],
                                   [2, 40, 256, 1024], [2, 5, 0, 256]])
@pytest.mark.parametrize("skips", [(2, 2), (0, 0), (1, 3), (7, 7)])
def test_stream_sizes_are_lmcaches(shape: list[int], skips: tuple[int, int]) -> None:
    kwargs = {"skip_first_layers": skips[0], "skip_last_layers": skips[1], "block_size": 16}
    for name in LMCACHE_PRESET_NAMES:
        theirs = lmc._serialized_nbytes_for_shape(
            torch.Size(shape), torch.bfloat16,
            lmc.TurboQuantSerdeConfig(preset=name, head_dim=128, **kwargs))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", AllRawLayoutWarning)
            ours = TurboQuantConfig(preset=name, **kwargs).plan(torch.Size(shape), torch.bfloat16)
        assert ours.nbytes == theirs
        assert (ours.quant_start, ours.quant_end) == lmc._layer_ranges(
            shape[1], lmc.TurboQuantSerdeConfig(preset=name, **kwargs))
