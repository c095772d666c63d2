"""fp8 encode/decode of float tensors: the public codec API and the backend dispatch.

Three backends write identical bytes (tested): ``native`` (the C kernels at the best SIMD level this
CPU runs), ``portable`` (the C kernels' scalar code) and ``torch`` (:mod:`lmserde_fp8.torch_codec`).
``auto`` picks ``native`` for CPU tensors when the extension is available, else ``torch``.

Range rules (pinned, identical on every backend and torch version):

* no scale: exactly torch's cast ``x.to(fp8)`` for finite in-range values; ``float8_e4m3fn``
  saturates larger finite values and +-inf to +-448, ``float8_e5m2`` rounds to +-inf from 61440 on
  (and keeps +-inf); NaN becomes ``0x7F | sign``.
* scale ``s``: ``clamp(x.float() / s, -max, max).to(fp8)``, the division in float32.
* decode: ``codes.view(fp8).to(dtype)``, or ``(codes.view(fp8).float() * s).to(dtype)``.
"""

from __future__ import annotations

import ctypes
import math
from typing import Literal

import torch
from lmserde import PayloadHasher, hasher_c_api

from lmserde_fp8 import kernel, torch_codec
from lmserde_fp8.float_buffer import FloatBuffer
from lmserde_fp8.formats import FLOAT_KINDS, Fp8Format, float_kind, fp8_format
from lmserde_fp8.scaling import MAX_EXPONENT, exponents_to_scales, scale_exponents

__all__ = [
    "Backend",
    "quantize_into",
    "dequantize_into",
    "fast_path_available",
    "encode",
    "decode",
    "encode_hashed",
    "decode_hashed",
    "encode_pow2",
    "decode_pow2",
    "row_absmax",
    "finite_absmax",
]

Backend = Literal["auto", "native", "portable", "torch"]


def fast_path_available() -> bool:
    """True when the native C kernels are built and enabled (see :mod:`lmserde_fp8.kernel`)."""
    return kernel.fast_path_available()


def _resolve(backend: Backend, *tensors: torch.Tensor) -> Backend:
    if backend not in ("auto", "native", "portable", "torch"):
        raise ValueError(f"unknown fp8 codec backend {backend!r}")
    on_cpu = all(t.device.type == "cpu" for t in tensors)
    if backend == "auto":
        return "native" if on_cpu and kernel.fast_path_available() else "torch"
    if backend != "torch":
        if not on_cpu:
            raise ValueError(f"the {backend} fp8 backend runs on CPU tensors only")
        kernel.native_module()  # raises if not built
    return backend


def _level(backend: Backend) -> int:
    return kernel.PORTABLE if backend == "portable" else kernel.BEST


def _check_flat_codes(codes: torch.Tensor, n: int, what: str) -> None:
    """``ValueError`` (naming the argument ``what``) unless ``codes`` is a contiguous 1-D uint8
    tensor of ``n`` elements: the fp8 codes every encode writes and every decode reads."""
    if codes.dtype != torch.uint8 or codes.dim() != 1 or not codes.is_contiguous() or codes.numel() != n:
        raise ValueError(f"{what} must be a contiguous 1-D uint8 tensor of {n} elements")


def _rows_of(numel: int, scales: torch.Tensor | None) -> tuple[int, int]:
    if scales is None:
        return (1, numel) if numel else (0, 0)
    rows = scales.numel()
    if scales.dtype != torch.float32 or scales.dim() != 1 or not scales.is_contiguous():
        raise ValueError("scales must be a contiguous 1-D float32 tensor")
    if scales.device.type != "cpu":
        raise ValueError("scales must be a CPU tensor")
    if rows and not bool((torch.isfinite(scales) & (scales > 0)).all()):
        raise ValueError("scales must be positive and finite")
    if rows == 0 or numel % rows:
        if numel == 0:
            return rows, 0
        raise ValueError(f"{numel} values cannot be split into {rows} equal rows")
    return rows, numel // rows


def encode(src: FloatBuffer, out: torch.Tensor, fmt: Fp8Format,
           scales: torch.Tensor | None = None, *, backend: Backend = "auto") -> None:
    """Write the fp8 codes of ``src`` into the contiguous uint8 tensor ``out`` (``src.numel`` bytes).

    ``scales``: ``None``, or a float32 tensor with one positive scale per row (``src`` split into
    ``len(scales)`` equal rows).
    """
    n = src.numel
    _check_flat_codes(out, n, "out")
    rows, row_len = _rows_of(n, scales)
    if n == 0:
        return
    chosen = _resolve(backend, src.data, out)
    if chosen == "torch":
        torch_codec.encode(src.typed(), out, fmt, scales)
        return
    kernel.native_module().encode(
        src.address(), float_kind(src.dtype), out.data_ptr(), rows, row_len, fmt.kernel_id,
        0 if scales is None else scales.data_ptr(), _level(chosen),
    )


def decode(codes: torch.Tensor, dst: FloatBuffer, fmt: Fp8Format,
           scales: torch.Tensor | None = None, *, backend: Backend = "auto") -> None:
    """Write the values of the uint8 ``codes`` into ``dst`` (``dst.numel`` codes), then commit."""
    n = dst.numel
    _check_flat_codes(codes, n, "codes")
    rows, row_len = _rows_of(n, scales)
    if n == 0:
        return
    chosen = _resolve(backend, codes, dst.data)
    if chosen == "torch":
        dst.store(torch_codec.decode(codes, fmt, dst.dtype, scales))
    else:
        kernel.native_module().decode(
            codes.data_ptr(), fmt.kernel_id, dst.address(), float_kind(dst.dtype), rows, row_len,
            0 if scales is None else scales.data_ptr(), _level(chosen),
        )
    dst.commit()


def _native_hasher(chosen: Backend, hasher: PayloadHasher) -> tuple[object, object] | None:
    """The hasher's native handle and the C API when the native kernels can feed it."""
    if chosen == "torch":
        return None
    handle, api = hasher.c_hasher(), hasher_c_api()
    return None if handle is None or api is None else (handle, api)


def encode_hashed(src: FloatBuffer, out: torch.Tensor, fmt: Fp8Format, hasher: PayloadHasher,
                  *, backend: Backend = "auto") -> None:
    """:func:`encode` without scales, feeding the codes to ``hasher`` as they are written: the
    native kernel hashes each 1 KiB of codes right after writing it (lmserde's payload hasher
    C API); otherwise the codes are hashed after the encode."""
    n = src.numel
    _check_flat_codes(out, n, "out")
    chosen = _resolve(backend, src.data, out) if n else "torch"
    native = _native_hasher(chosen, hasher)
    if native is None:
        encode(src, out, fmt, backend=backend)
        hasher.update(out)
        return
    kernel.native_module().encode_hashed(src.address(), out.data_ptr(), n, float_kind(src.dtype),
                                         fmt.kernel_id, _level(chosen), *native)


def decode_hashed(codes: torch.Tensor, dst: FloatBuffer, fmt: Fp8Format, hasher: PayloadHasher,
                  *, backend: Backend = "auto") -> None:
    """:func:`decode` without scales, feeding the codes to ``hasher`` as they are read (the
    native kernel: each 4 KiB piece right after decoding it, the next piece prefetched), then
    commit."""
    n = dst.numel
    _check_flat_codes(codes, n, "codes")
    chosen = _resolve(backend, codes, dst.data) if n else "torch"
    native = _native_hasher(chosen, hasher)
    if native is None:
        decode(codes, dst, fmt, backend=backend)
        hasher.update(codes)
        return
    kernel.native_module().decode_hashed(codes.data_ptr(), dst.address(), n, float_kind(dst.dtype),
                                         fmt.kernel_id, _level(chosen), *native)
    dst.commit()


def _check_exponents(exponents: torch.Tensor, numel: int) -> int:
    if exponents.dtype != torch.int8 or exponents.dim() != 1 or not exponents.is_contiguous():
        raise ValueError("exponents must be a contiguous 1-D int8 tensor")
    rows = exponents.numel()
    if (rows == 0 and numel) or (rows and numel % rows):
        raise ValueError(f"{numel} values cannot be split into {rows} equal rows")
    return rows


def encode_pow2(src: FloatBuffer, out: torch.Tensor, fmt: Fp8Format, exponents: torch.Tensor, *,
                cap: int | None = None, backend: Backend = "auto") -> None:
    """Encode ``src`` split into ``len(exponents)`` equal rows, row ``r`` divided by ``2**k[r]``.

    With ``cap`` the exponents are first computed from each row's largest finite magnitude
    (:func:`lmserde_fp8.scaling.scale_exponents`, at most ``cap``) and written to ``exponents``;
    otherwise they are read from it (``ValueError`` if one is outside [-126, 126]).
    """
    n = src.numel
    _check_flat_codes(out, n, "out")
    rows = _check_exponents(exponents, n)
    if cap is not None and not 0 <= cap <= MAX_EXPONENT:
        raise ValueError(f"exponent cap must be in [0, {MAX_EXPONENT}], got {cap}")
    if n == 0:
        return
    chosen = _resolve(backend, src.data, out, exponents)
    if chosen == "torch":
        values = src.typed()
        if cap is not None:
            amax = torch_codec.row_absmax(values, rows)
            exponents.copy_(scale_exponents(amax, fmt, cap).to(exponents.device))
        torch_codec.encode(values, out, fmt, exponents_to_scales(exponents.cpu()))
        return
    kernel.native_module().encode_pow2(
        src.address(), float_kind(src.dtype), out.data_ptr(), rows, n // rows, fmt.kernel_id,
        exponents.data_ptr(), -1 if cap is None else cap, _level(chosen),
    )


def decode_pow2(codes: torch.Tensor, dst: FloatBuffer, fmt: Fp8Format, exponents: torch.Tensor, *,
                backend: Backend = "auto") -> None:
    """Decode into ``dst`` split into ``len(exponents)`` equal rows, row ``r`` times ``2**k[r]``
    (``ValueError`` if an exponent is outside [-126, 126])."""
    n = dst.numel
    _check_flat_codes(codes, n, "codes")
    rows = _check_exponents(exponents, n)
    if n == 0:
        return
    chosen = _resolve(backend, codes, dst.data, exponents)
    if chosen == "torch":
        dst.store(torch_codec.decode(codes, fmt, dst.dtype, exponents_to_scales(exponents.cpu())))
    else:
        kernel.native_module().decode_pow2(
            codes.data_ptr(), fmt.kernel_id, dst.address(), float_kind(dst.dtype), rows, n // rows,
            exponents.data_ptr(), _level(chosen),
        )
    dst.commit()


def row_absmax(src: FloatBuffer, rows: int, *, backend: Backend = "auto") -> torch.Tensor:
    """Largest finite ``|x|`` of each of ``rows`` equal rows of ``src`` (0.0 if none), float32 CPU."""
    n = src.numel
    if rows < 0 or (rows and n % rows) or (rows == 0 and n):
        raise ValueError(f"{n} values cannot be split into {rows} equal rows")
    chosen = _resolve(backend, src.data)
    if chosen == "torch" or rows == 0:
        return torch_codec.row_absmax(src.typed(), rows)
    out = torch.empty(rows, dtype=torch.float32)
    kernel.native_module().absmax(src.address(), float_kind(src.dtype), rows, n // rows,
                                  out.data_ptr(), _level(chosen))
    return out


# -- public tensor API ---------------------------------------------------------------------------


def _check_float(t: torch.Tensor, role: str) -> None:
    if not isinstance(t, torch.Tensor) or t.dtype not in FLOAT_KINDS:
        got = t.dtype if isinstance(t, torch.Tensor) else type(t).__name__
        raise ValueError(f"{role} must be a float32, bfloat16 or float16 tensor, got {got}")


def _check_codes(t: torch.Tensor, n: int, role: str) -> None:
    if not isinstance(t, torch.Tensor) or t.dtype != torch.uint8:
        got = t.dtype if isinstance(t, torch.Tensor) else type(t).__name__
        raise ValueError(f"{role} must be a uint8 tensor, got {got}")
    if t.numel() != n:
        raise ValueError(f"{role} has {t.numel()} elements, expected {n}")


def _scale_f32(scale: float) -> float:
    """``scale`` rounded to float32 (returned as the equal Python float); ``ValueError`` unless it
    is a positive finite number there."""
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise ValueError(f"scale must be a positive finite number or None, got {scale!r}")
    try:
        value = ctypes.c_float(float(scale)).value  # the C cast: round to nearest, inf on overflow
    except OverflowError:  # an int too large for a double
        value = math.inf
    if not (math.isfinite(value) and value > 0.0):
        raise ValueError(
            f"scale must be positive and finite in float32, got {scale!r} (float32 {value!r})"
        )
    return value


def _native_cpu(*tensors: torch.Tensor) -> bool:
    """Whether the native kernels can work on these (CPU) tensors."""
    return kernel.fast_path_available() and all(t.device.type == "cpu" for t in tensors)


def quantize_into(src: torch.Tensor, out: torch.Tensor, fp8_dtype: torch.dtype, *,
                  scale: float | None = None) -> None:
    """Write the fp8 codes of ``src`` into ``out``.

    ``src``: float32/bfloat16/float16 tensor of N elements, any shape and strides (read in
    row-major order). ``out``: contiguous uint8 tensor of N elements. Without ``scale`` the bytes
    are exactly ``src.to(fp8_dtype).view(torch.uint8)`` for finite in-range values (range rules in
    the module docstring); with ``scale`` they are
    ``torch.clamp(src.float() / scale, -fmax, fmax).to(fp8_dtype)`` (division in float32, by
    ``scale`` rounded to float32, which must be positive and finite).
    """
    fmt = fp8_format(fp8_dtype)
    _check_float(src, "src")
    _check_codes(out, src.numel(), "out")
    if not out.is_contiguous():
        raise ValueError("out must be contiguous")
    if scale is None:
        encode(FloatBuffer.of_tensor(src), out.reshape(-1), fmt, None)
        return
    s32 = _scale_f32(scale)
    n = src.numel()
    if _native_cpu(src, out):
        if n:
            src = src.contiguous()
            kernel.native_module().encode_scaled(
                src.data_ptr(), FLOAT_KINDS[src.dtype], out.data_ptr(), n, fmt.kernel_id, s32,
                kernel.BEST,
            )
        return
    scales = torch.tensor([s32], dtype=torch.float32)
    encode(FloatBuffer.of_tensor(src), out.reshape(-1), fmt, scales if n else None)


def dequantize_into(codes: torch.Tensor, out: torch.Tensor, fp8_dtype: torch.dtype, *,
                    scale: float | None = None) -> None:
    """Write the values of the fp8 ``codes`` into ``out``.

    ``codes``: uint8 tensor of N elements. ``out``: float32/bfloat16/float16 tensor of N elements
    (any strides). Writes ``codes.view(fp8_dtype).to(out.dtype)``, or with ``scale``
    ``(codes.view(fp8_dtype).float() * scale).to(out.dtype)`` (``scale`` rounded to float32).
    """
    fmt = fp8_format(fp8_dtype)
    _check_float(out, "out")
    _check_codes(codes, out.numel(), "codes")
    if scale is None:
        decode(codes.reshape(-1).contiguous(), FloatBuffer.of_tensor(out), fmt, None)
        return
    s32 = _scale_f32(scale)
    n = out.numel()
    if _native_cpu(codes, out):
        if n:
            codes = codes.contiguous()
            target = out if out.is_contiguous() else torch.empty(out.shape, dtype=out.dtype)
            kernel.native_module().decode_scaled(
                codes.data_ptr(), fmt.kernel_id, target.data_ptr(), FLOAT_KINDS[out.dtype], n,
                s32, kernel.BEST,
            )
            if target is not out:
                out.copy_(target)
        return
    scales = torch.tensor([s32], dtype=torch.float32)
    decode(codes.reshape(-1).contiguous(), FloatBuffer.of_tensor(out), fmt, scales if n else None)


def finite_absmax(t: torch.Tensor) -> float:
    """The largest finite ``|x|`` of the float tensor ``t`` as float32 (returned as the equal
    Python float), ``0.0`` when ``t`` has no finite nonzero value.

    float32/bfloat16/float16 are read as they are (the native kernel on contiguous CPU tensors,
    one thread, GIL released); other float dtypes are converted to float32 first (values beyond
    float32's range then count as infinite). ``ValueError`` for non-float tensors.
    """
    if not isinstance(t, torch.Tensor) or not t.dtype.is_floating_point:
        got = t.dtype if isinstance(t, torch.Tensor) else type(t).__name__
        raise ValueError(f"finite_absmax needs a floating-point tensor, got {got}")
    if t.dtype not in FLOAT_KINDS:
        t = t.float()
    n = t.numel()
    if n == 0:
        return 0.0
    if _native_cpu(t):
        t = t.contiguous()
        return float(kernel.native_module().finite_absmax(t.data_ptr(), FLOAT_KINDS[t.dtype], n,
                                                          kernel.BEST))
    return float(torch_codec.row_absmax(t.reshape(-1), 1).item())
