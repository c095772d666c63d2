"""The public codec API: quantize_into / dequantize_into / fast_path_available, and bad input."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
from fp8_support import NATIVE_BUILT, bits
from lmserde_fp8 import dequantize_into, fast_path_available, kernel, quantize_into


@pytest.fixture
def torch_codec_only() -> Iterator[None]:
    was = kernel.fast_path_available()
    kernel.set_fast_path_enabled(False)
    try:
        yield
    finally:
        kernel.set_fast_path_enabled(was)


def test_fast_path_available_reports_the_extension(torch_codec_only: None) -> None:
    assert fast_path_available() is False
    kernel.set_fast_path_enabled(True)
    assert fast_path_available() is NATIVE_BUILT


def test_quantize_matches_torch_cast_on_either_path(torch_codec_only: None) -> None:
    x = torch.randn(3, 5, 77).to(torch.bfloat16) * 100
    expected = x.to(torch.float8_e4m3fn).view(torch.uint8).reshape(-1)
    slow = torch.empty(x.numel(), dtype=torch.uint8)
    quantize_into(x, slow, torch.float8_e4m3fn)
    kernel.set_fast_path_enabled(True)
    fast = torch.empty_like(slow)
    quantize_into(x, fast, torch.float8_e4m3fn)
    assert torch.equal(slow, expected) and torch.equal(fast, expected)


def test_strided_source_and_destination() -> None:
    x = torch.randn(64, 48).to(torch.float16).t()  # non-contiguous view
    codes = torch.empty(x.numel(), dtype=torch.uint8)
    quantize_into(x, codes, torch.float8_e5m2)
    assert torch.equal(codes, x.contiguous().to(torch.float8_e5m2).view(torch.uint8).reshape(-1))
    out = torch.zeros(48, 64, dtype=torch.float32).t()
    dequantize_into(codes.view(64, 48), out, torch.float8_e5m2, scale=0.5)
    expected = (codes.view(torch.float8_e5m2).float() * 0.5).view(64, 48)
    assert torch.equal(out, expected)


def test_scaled_forms_are_the_documented_expressions() -> None:
    x = torch.randn(1000) * 40
    codes = torch.empty(1000, dtype=torch.uint8)
    quantize_into(x, codes, torch.float8_e4m3fn, scale=0.3)
    expected = torch.clamp(x / 0.3, -448, 448).to(torch.float8_e4m3fn).view(torch.uint8)
    assert torch.equal(codes, expected)
    out = torch.empty(1000, dtype=torch.bfloat16)
    dequantize_into(codes, out, torch.float8_e4m3fn, scale=0.3)
    assert torch.equal(bits(out), bits((codes.view(torch.float8_e4m3fn).float() * 0.3).to(torch.bfloat16)))


def test_empty_and_zero_dim_tensors() -> None:
    quantize_into(torch.empty(0), torch.empty(0, dtype=torch.uint8), torch.float8_e4m3fn, scale=2.0)
    out = torch.empty((), dtype=torch.float16)
    code = torch.empty(1, dtype=torch.uint8)
    quantize_into(torch.tensor(1.5), code, torch.float8_e4m3fn)
    dequantize_into(code, out, torch.float8_e4m3fn)
    assert out.item() == 1.5


@pytest.mark.parametrize(
    ("src", "out", "fp8", "kwargs", "message"),
    [
        (torch.zeros(4, dtype=torch.int32), torch.zeros(4, dtype=torch.uint8), torch.float8_e4m3fn,
         {}, "src must be a float32, bfloat16 or float16 tensor"),
        (torch.zeros(4), torch.zeros(4, dtype=torch.int8), torch.float8_e4m3fn, {},
         "out must be a uint8 tensor"),
        (torch.zeros(4), torch.zeros(5, dtype=torch.uint8), torch.float8_e4m3fn, {},
         "out has 5 elements, expected 4"),
        (torch.zeros(4), torch.zeros(8, dtype=torch.uint8)[::2], torch.float8_e4m3fn, {},
         "out must be contiguous"),
        (torch.zeros(4), torch.zeros(4, dtype=torch.uint8), torch.float16, {},
         "fp8 dtype must be torch.float8_e4m3fn or torch.float8_e5m2"),
        (torch.zeros(4), torch.zeros(4, dtype=torch.uint8), torch.float8_e4m3fn, {"scale": 0.0},
         "scale must be positive and finite"),
        (torch.zeros(4), torch.zeros(4, dtype=torch.uint8), torch.float8_e4m3fn, {"scale": -1.0},
         "scale must be positive and finite"),
        (torch.zeros(4), torch.zeros(4, dtype=torch.uint8), torch.float8_e4m3fn,
         {"scale": float("inf")}, "scale must be positive and finite"),
        (torch.zeros(4), torch.zeros(4, dtype=torch.uint8), torch.float8_e4m3fn,
         {"scale": float("nan")}, "scale must be positive and finite"),
        (torch.zeros(4), torch.zeros(4, dtype=torch.uint8), torch.float8_e4m3fn, {"scale": 1e-50},
         "scale must be positive and finite in float32"),
        (torch.zeros(4), torch.zeros(4, dtype=torch.uint8), torch.float8_e4m3fn, {"scale": True},
         "scale must be a positive finite number or None"),
        (torch.zeros(4), torch.zeros(4, dtype=torch.uint8), torch.float8_e4m3fn, {"scale": "2"},
         "scale must be a positive finite number or None"),
    ],
)
def test_quantize_rejects_bad_input(src: torch.Tensor, out: torch.Tensor, fp8: torch.dtype,
                                    kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        quantize_into(src, out, fp8, **kwargs)


def test_dequantize_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="out must be a float32, bfloat16 or float16 tensor"):
        dequantize_into(torch.zeros(4, dtype=torch.uint8), torch.zeros(4, dtype=torch.float64),
                        torch.float8_e4m3fn)
    with pytest.raises(ValueError, match="codes must be a uint8 tensor"):
        dequantize_into(torch.zeros(4), torch.zeros(4), torch.float8_e4m3fn)
    with pytest.raises(ValueError, match="codes has 3 elements, expected 4"):
        dequantize_into(torch.zeros(3, dtype=torch.uint8), torch.zeros(4), torch.float8_e4m3fn)


def test_native_module_missing_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernel.FASTCODEC, "_module", None)
    assert not kernel.fast_path_available() and kernel.simd_level() == -1
    with pytest.raises(RuntimeError, match=r"lmserde_fp8\._fastcodec is not built"):
        kernel.native_module()
    # the public API keeps working on the torch codec
    codes = torch.empty(3, dtype=torch.uint8)
    quantize_into(torch.tensor([1.0, 500.0, -2.0]), codes, torch.float8_e4m3fn)
    assert codes.tolist() == [0x38, 0x7E, 0xC0]


@pytest.mark.skipif(not NATIVE_BUILT, reason="native codec not built")
def test_native_entry_points_validate_their_arguments() -> None:
    module = kernel.native_module()
    with pytest.raises(ValueError, match="unsupported float kind or fp8 kind"):
        module.encode(0, 7, 0, 0, 0, 0, 0, 1)
    with pytest.raises(ValueError, match="unsupported float kind or fp8 kind"):
        module.decode(0, 2, 0, 0, 0, 0, 0, 1)
    with pytest.raises(ValueError, match="row count and row length must be >= 0"):
        module.absmax(0, 0, -1, 0, 0, 1)
    assert module.simd_level() in (0, 1, 2)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_tensors_use_the_torch_codec() -> None:
    x = torch.randn(1000, device="cuda").to(torch.bfloat16) * 1000
    codes = torch.empty(1000, dtype=torch.uint8, device="cuda")
    quantize_into(x, codes, torch.float8_e4m3fn)
    host = torch.empty(1000, dtype=torch.uint8)
    quantize_into(x.cpu(), host, torch.float8_e4m3fn)
    assert torch.equal(codes.cpu(), host)


def test_internal_codec_rejects_bad_arguments() -> None:
    from lmserde_fp8.codec import decode_pow2, encode, encode_pow2
    from lmserde_fp8.float_buffer import FloatBuffer
    from lmserde_fp8.formats import fp8_format

    fmt = fp8_format(torch.float8_e4m3fn)
    src = FloatBuffer.of_tensor(torch.ones(8))
    out = torch.empty(8, dtype=torch.uint8)
    cases = [
        (lambda: encode(src, out, fmt, torch.tensor([1.0, -2.0])), "positive and finite"),
        (lambda: encode(src, out, fmt, torch.tensor([1.0], dtype=torch.float64)), "float32 tensor"),
        (lambda: encode(src, out, fmt, torch.ones(3)), "cannot be split into 3 equal rows"),
        (lambda: encode(src, out[:7], fmt), "uint8 tensor of 8 elements"),
        (lambda: encode(src, out, fmt, backend="gpu"), "unknown fp8 codec backend"),  # type: ignore[arg-type]
        (lambda: encode_pow2(src, out, fmt, torch.zeros(2, dtype=torch.int16)), "int8 tensor"),
        (lambda: encode_pow2(src, out, fmt, torch.zeros(2, dtype=torch.int8), cap=200), "cap"),
        (lambda: decode_pow2(out, FloatBuffer.of_tensor(torch.empty(8)), fmt,
                             torch.tensor([127], dtype=torch.int8)), "scale exponent outside"),
        (lambda: FloatBuffer.of_bytes(torch.zeros(7, dtype=torch.uint8), torch.float16),
         "not a whole number of"),
        (lambda: FloatBuffer.of_tensor(torch.zeros(4, dtype=torch.int32)), "reads and writes"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message):
            call()


def test_native_status_and_one_fallback_warning(monkeypatch: pytest.MonkeyPatch,
                                                caplog: pytest.LogCaptureFixture) -> None:
    from lmserde import create_serde_processor, get_serde_spec
    from lmserde_fp8 import kernel

    if kernel.simd_level() >= 0 and kernel.fast_path_available():
        assert get_serde_spec("fp8").describe_native() == {
            "backend": "native", "simd": kernel.SIMD_NAMES[kernel.simd_level()], "built": True}
        assert get_serde_spec("asym_k16_v8").describe_native() == kernel.native_status()
    monkeypatch.setattr(kernel.FASTCODEC, "_module", None)
    monkeypatch.setattr(kernel.FASTCODEC, "_fallback_logged", False)
    status = get_serde_spec("fp8").describe_native()
    assert status is not None and status["backend"] == "torch" and status["built"] is False
    assert "not built" in status["reason"]
    with caplog.at_level("WARNING", logger="lmserde_fp8"):
        for _ in range(3):
            create_serde_processor({"type": "fp8"}).close()
    fallbacks = [r for r in caplog.records if "pure-torch codec" in r.getMessage()]
    assert len(fallbacks) == 1 and fallbacks[0].levelname == "WARNING"
