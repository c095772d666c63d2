"""lmserde-fp8: the ``fp8`` serde (LMCache-compatible bytes) and a fast fp8 codec.

Public codec API (also used by other plugins):

* :func:`quantize_into` / :func:`dequantize_into`: fp8 encode/decode of float tensors, bit-identical
  to torch's cast (range rules pinned, see :mod:`lmserde_fp8.codec`);
* :func:`finite_absmax`: the largest finite ``|x|`` of a float tensor (for per-tensor scales);
* :func:`fast_path_available`: whether the native C kernels are in use;
* :func:`native_status`: the codec this process runs (``backend``, ``simd``), and
  :func:`log_fallback_once`, for a serde built on this codec to log once that it runs slowly.

The serde itself is :data:`FP8_SPEC` (entry point ``fp8`` in group ``lmcache.serde``).
"""

from __future__ import annotations

from lmserde_fp8.codec import dequantize_into, fast_path_available, finite_absmax, quantize_into
from lmserde_fp8.kernel import log_fallback_once, native_status
from lmserde_fp8.scaling import ScalingMode
from lmserde_fp8.serde import Fp8QuantizationDeserializer, Fp8QuantizationSerializer
from lmserde_fp8.spec import FP8_SPEC

__version__ = "0.1.0"

__all__ = [
    "FP8_SPEC",
    "Fp8QuantizationDeserializer",
    "Fp8QuantizationSerializer",
    "ScalingMode",
    "dequantize_into",
    "fast_path_available",
    "finite_absmax",
    "log_fallback_once",
    "native_status",
    "quantize_into",
    "__version__",
]
