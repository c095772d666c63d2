"""Large decodes use streaming stores and still write exactly torch's values, and nothing else.

A native decode into ``STREAM_MIN_BYTES`` or more writes with non-temporal stores from each row's
first 64-byte line on (the elements before it, and destinations that cannot be line-aligned on an
element boundary, go through the cache). The bytes must not depend on that: every offset of the
destination inside its buffer, every destination dtype, both fp8 formats, and every scaling form
(none, one general scale, one power of two, a scale per row, a power-of-two exponent per row)
decode like the torch codec, and the bytes around the destination are never written.
"""

from __future__ import annotations

from types import ModuleType

import pytest
import torch
from fp8_support import FLOAT_DTYPES, FP8_DTYPES, NATIVE_BUILT
from lmserde_fp8 import kernel
from lmserde_fp8.codec import decode, decode_pow2
from lmserde_fp8.float_buffer import FloatBuffer
from lmserde_fp8.formats import fp8_format

pytestmark = pytest.mark.skipif(not NATIVE_BUILT, reason="native codec not built")

FILL = 0xEE
ROWS = 512
SCALINGS = ["none", "general", "pow2", "per_row", "pow2_per_row"]


def _codes(n: int) -> torch.Tensor:
    """Random codes, NaN codes included (their 32-code blocks take the scalar path mid-loop)."""
    return torch.randint(0, 256, (n,), dtype=torch.uint8, generator=torch.Generator().manual_seed(n))


def _decode_into(codes: torch.Tensor, target: torch.Tensor, dtype: torch.dtype, fp8: torch.dtype,
                 scaling: str, backend: str) -> None:
    fmt = fp8_format(fp8)
    out = FloatBuffer.of_bytes(target, dtype)
    gen = torch.Generator().manual_seed(7)
    if scaling == "pow2_per_row":
        exponents = torch.randint(-20, 20, (ROWS,), dtype=torch.int8, generator=gen)
        decode_pow2(codes, out, fmt, exponents, backend=backend)  # type: ignore[arg-type]
        return
    scales = {
        "none": None,
        "general": torch.tensor([0.37], dtype=torch.float32),
        "pow2": torch.tensor([2.0**-5], dtype=torch.float32),
        "per_row": torch.rand(ROWS, generator=gen) * 4 + 0.01,
    }[scaling]
    decode(codes, out, fmt, scales, backend=backend)  # type: ignore[arg-type]


def _native() -> ModuleType:
    from lmserde_fp8 import _fastcodec  # type: ignore[attr-defined]

    return _fastcodec


@pytest.mark.parametrize("scaling", SCALINGS)
@pytest.mark.parametrize("fp8", FP8_DTYPES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("offset", [0, 2, 36, 63])
def test_large_decodes_match_torch_at_any_destination_offset(
        offset: int, dtype: torch.dtype, fp8: torch.dtype, scaling: str) -> None:
    n = _native().STREAM_MIN_BYTES // dtype.itemsize + ROWS * 3  # over the threshold, whole rows
    n -= n % ROWS
    codes = _codes(n)
    size = n * dtype.itemsize
    streamed = torch.full((offset + size + 64,), FILL, dtype=torch.uint8)
    calls = _native().streamed_decodes()
    target = streamed[offset:offset + size]
    _decode_into(codes, target, dtype, fp8, scaling, "native")
    if kernel.simd_level() >= 1:  # streamed, unless no element of the destination starts a line
        expected = calls + (target.data_ptr() % dtype.itemsize == 0)
        assert _native().streamed_decodes() == expected
    reference = torch.full((size,), FILL, dtype=torch.uint8)
    _decode_into(codes, reference, dtype, fp8, scaling, "torch")
    assert torch.equal(streamed[offset:offset + size], reference)
    assert bool((streamed[:offset] == FILL).all())
    assert bool((streamed[offset + size:] == FILL).all())


def test_small_decodes_and_the_portable_level_do_not_stream() -> None:
    codes = _codes(1024)
    calls = _native().streamed_decodes()
    out = torch.empty(1024, dtype=torch.bfloat16)
    decode(codes, FloatBuffer.of_tensor(out), fp8_format(torch.float8_e4m3fn), backend="native")
    n = _native().STREAM_MIN_BYTES
    big = torch.empty(n, dtype=torch.uint8)
    decode(_codes(n // 2), FloatBuffer.of_bytes(big, torch.bfloat16),
           fp8_format(torch.float8_e4m3fn), backend="portable")
    assert _native().streamed_decodes() == calls
