"""Run LMCache 0.5.6's TurboQuant serializer and deserializer, Triton kernels included, on the CPU.

LMCache's TurboQuant serde stages every tensor on a CUDA device and launches Triton kernels there.
Triton's interpreter (what ``TRITON_INTERPRET=1`` selects) executes ``@triton.jit`` functions in
Python on CPU tensors, one program instance after another. :func:`lmcache_turboquant_on_cpu`
applies, for the duration of a ``with`` block, the runtime patches that make LMCache's own
``TurboQuantSerializer`` / ``TurboQuantDeserializer`` run that way; no installed file is edited
and everything is restored on exit. Each patch says what it replaces, why, and what a GPU does.

What this cannot show is the GPU's own float32 arithmetic: the interpreter evaluates the kernels
with numpy (IEEE float32, correctly rounded division and square root, no fused multiply-add),
while Triton lowers ``/`` on float32 to ``div.full.f32`` (up to 2 ulp off) and lets LLVM fuse
``a * b + c``. See ``docs/plugins/turboquant.md``, "Relation to LMCache's TurboQuant serde".
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import torch

#: Largest finite float8 e4m3fn magnitude; ``cvt.rn.satfinite`` saturates to it.
E4M3_MAX = 448.0


@contextmanager
def lmcache_turboquant_on_cpu() -> Iterator[ModuleType]:
    """LMCache's ``turboquant`` module, its kernels running in Triton's interpreter on the CPU."""
    import triton
    from lmcache.v1.distributed.serde.turboquant import (
        decode_kernel,
        store_kernel,
        turboquant,
    )

    with pytest.MonkeyPatch.context() as mp:
        _interpret_kernels(mp, triton, [store_kernel, decode_kernel])
        _stage_on_the_cpu(mp, turboquant)
        _pick_e4m3_keys(mp, decode_kernel)
        _convert_fp8_like_the_gpu(mp)
        yield turboquant


def _interpret_kernels(mp: pytest.MonkeyPatch, triton: ModuleType,
                       kernel_modules: list[ModuleType]) -> None:
    """Patch 1: every ``@triton.jit`` function the kernels reach becomes an interpreted function.

    What: ``TRITON_INTERPRET=1`` makes ``@triton.jit`` return an ``InterpretedFunction`` instead of
    a ``JITFunction``, but only for functions decorated after the variable is set, so it has to be
    set before ``triton`` is first imported. Here the same wrapping is done afterwards: each
    ``JITFunction`` in LMCache's two kernel modules and in ``triton.language`` (``tl.min``,
    ``tl.max``, ``tl.sum`` and their combine functions are ``@triton.jit`` too) is replaced by an
    ``InterpretedFunction`` of the same Python function, and the ``interpret`` knob is set (Triton's
    experimental ``gluon`` package, imported lazily by the interpreter, checks it).
    Why: so the test does not depend on import order or on an environment variable.
    GPU: the same functions are compiled to PTX and launched on the grid; nothing is wrapped.
    """
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    mp.setattr(triton.knobs.runtime, "interpret", True)
    wrapped: dict[int, Any] = {}
    owners: list[Any] = [m for name, m in sorted(sys.modules.items())
                         if name == "triton.language" or name.startswith("triton.language.")]
    owners += [*kernel_modules, sys.modules["triton.language"].core.tensor]
    for owner in owners:
        for name, value in list(vars(owner).items()):
            if isinstance(value, JITFunction):
                if id(value) not in wrapped:
                    wrapped[id(value)] = InterpretedFunction(value.fn)
                mp.setattr(owner, name, wrapped[id(value)])


def _stage_on_the_cpu(mp: pytest.MonkeyPatch, turboquant: ModuleType) -> None:
    """Patch 2: LMCache's CUDA device selection returns the CPU.

    What: ``_select_cuda_device`` (called by ``serialize`` and ``deserialize``) is replaced by a
    function returning ``torch.device("cpu")``.
    Why: without CUDA it raises ``RuntimeError("TurboQuant Triton serde requires CUDA")``; with the
    CPU as "staging device" its own code copies the CPU tensors to CPU temporaries, computes the
    key norms and the rotation ``x_hat @ PiT`` with torch on the CPU, launches the interpreted
    kernels on them and copies the results back, i.e. it runs unchanged.
    GPU: it picks a CUDA device with enough free memory and the lowest utilisation, stages the
    tensors there, and the norm and rotation run in cuBLAS/CUDA reductions (a different summation
    order than the CPU's, hence other float32 roundings of the rotated keys).
    """
    mp.setattr(turboquant, "_select_cuda_device",
               lambda required_bytes, configured, *tensors: torch.device("cpu"))


def _pick_e4m3_keys(mp: pytest.MonkeyPatch, decode_kernel: ModuleType) -> None:
    """Patch 3: the compute-capability cache answers "8.9 or newer" (fp8 keys as e4m3fn).

    What: ``_use_fp8_e4b15(device)`` caches ``1`` when ``get_device_capability`` is below (8, 9)
    and then the ``turboquant_k8v4`` kernels write keys as Triton's ``float8e4b15``; ``0`` selects
    ``float8e4nv``, i.e. float8 e4m3fn. The cache entry for device 0 (the CPU device has no index,
    LMCache uses ``index or 0``) is set to ``0`` before any lookup.
    Why: the CPU stub device has no compute capability; e4m3fn is the flavour lmserde writes and
    the only one whose bytes are portable (the stream does not record the flavour).
    GPU: Ada (8.9), Hopper and newer take the same branch; older GPUs write e4b15 bytes.
    """
    mp.setitem(decode_kernel._FP8_E4B15, 0, 0)


def _convert_fp8_like_the_gpu(mp: pytest.MonkeyPatch) -> None:
    """Patch 4: the interpreter's float8e4nv conversions round and saturate like the GPU's.

    What: ``InterpreterBuilder.create_fp_to_fp`` is wrapped; casts to ``float8e4nv`` become
    ``clamp(x, -448, 448)`` rounded to nearest even (torch's ``float8_e4m3fn`` cast), casts from it
    an exact widening (NaN codes 0x7f/0xff decode to NaN). Other conversions are untouched.
    Why: the interpreter's generic bit-manipulating converter (``_convert_float``) rounds half up
    on the first dropped bit only (not to nearest even), turns values that underflow e4m3 into
    garbage codes instead of subnormals or zero, does not saturate (464 becomes 0x7f, a NaN) and
    widens 0x7f to 480 instead of NaN. Over every fp16 bit pattern it disagrees with correctly
    rounded e4m3 for 7526 finite inputs within +-448.
    GPU: Triton lowers fp16 -> e4m3 to ``cvt.rn.satfinite.e4m3x2.f16x2`` and bf16 -> e4m3 to an
    exact widening to f32 followed by ``cvt.rn.satfinite.e4m3x2.f32``: round to nearest even,
    saturating finite and infinite values to +-448, NaN stays NaN; e4m3 -> f16 is the exact
    ``cvt.rn.f16x2.e4m3x2``. This patch computes exactly that, on the CPU.
    """
    import triton.language as tl
    from triton.runtime import interpreter

    original = interpreter.InterpreterBuilder.create_fp_to_fp

    def create_fp_to_fp(self: Any, src: Any, dst_type: Any, rounding_mode: Any) -> Any:
        src_ty, dst_ty = src.dtype.scalar, dst_type.scalar
        if dst_ty == tl.float8e4nv:
            wide = _interpreter_data_as_float32(src.data, src_ty, tl)
            code = wide.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).view(torch.uint8)
            return interpreter.TensorHandle(code.numpy().reshape(src.data.shape), dst_ty)
        if src_ty == tl.float8e4nv:
            wide = torch.from_numpy(np.ascontiguousarray(src.data)).view(torch.float8_e4m3fn)
            data = _float32_as_interpreter_data(wide.float(), dst_ty, tl)
            return interpreter.TensorHandle(data.reshape(src.data.shape), dst_ty)
        return original(self, src, dst_type, rounding_mode)

    mp.setattr(interpreter.InterpreterBuilder, "create_fp_to_fp", create_fp_to_fp)


def _interpreter_data_as_float32(data: np.ndarray, ty: Any, tl: ModuleType) -> torch.Tensor:
    """The interpreter's storage of a float tensor (bfloat16 is kept as raw uint16) as float32."""
    flat = np.ascontiguousarray(data).reshape(-1)
    if ty == tl.bfloat16:
        return torch.from_numpy(flat.view(np.int16).copy()).view(torch.bfloat16).float()
    if ty in (tl.float16, tl.float32, tl.float64):
        return torch.from_numpy(flat.astype(np.float32))
    raise TypeError(f"no float32 view of interpreter type {ty}")


def _float32_as_interpreter_data(x: torch.Tensor, ty: Any, tl: ModuleType) -> np.ndarray:
    """``x`` (float32) rounded to ``ty`` and stored as the interpreter stores ``ty``."""
    if ty == tl.bfloat16:
        return x.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    if ty == tl.float16:
        return x.to(torch.float16).numpy()
    if ty == tl.float32:
        return x.numpy()
    raise TypeError(f"no conversion of float8e4nv to interpreter type {ty}")
