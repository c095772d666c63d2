"""lmserde-asym-k16-v8: K stored bit-exact, V as fp8 with a per-tensor scale (LMCache EncodedKV v1).

Serde types (entry points in ``lmcache.serde``): ``asym_k16_v8`` (slots K, V; mapping ``(0, 1)``)
and ``asym_k16_v8_v_only`` (V alone; mapping ``(None, 1)``). See ``docs/plugins/asym_k16_v8.md``.
"""

from lmserde_asym_k16_v8.codec import HEADER_ALLOWANCE, AsymCodec, estimate_blob_size
from lmserde_asym_k16_v8.crc32 import crc32_combine
from lmserde_asym_k16_v8.dtype_ids import DTYPE_TO_ID, dtype_from_id, dtype_to_id
from lmserde_asym_k16_v8.encoded_kv import (
    MAGIC,
    PROVENANCE_KEYS,
    CorruptEncodedKVError,
    EncodedKVHeader,
    PayloadLocation,
    locate_payload,
)
from lmserde_asym_k16_v8.quantization import per_tensor_scale
from lmserde_asym_k16_v8.scale_scope import ScaleScope, parse_scale_scope
from lmserde_asym_k16_v8.serdes import (
    AsymK16V8MultiDeserializer,
    AsymK16V8MultiSerializer,
    AsymK16V8VOnlyMultiDeserializer,
    AsymK16V8VOnlyMultiSerializer,
)
from lmserde_asym_k16_v8.spec import (
    ASYM_K16_V8_SPEC,
    ASYM_K16_V8_V_ONLY_SPEC,
    create_asym_k16_v8,
    create_asym_k16_v8_v_only,
)

__all__ = [
    "ASYM_K16_V8_SPEC",
    "ASYM_K16_V8_V_ONLY_SPEC",
    "DTYPE_TO_ID",
    "HEADER_ALLOWANCE",
    "MAGIC",
    "PROVENANCE_KEYS",
    "AsymCodec",
    "AsymK16V8MultiDeserializer",
    "AsymK16V8MultiSerializer",
    "AsymK16V8VOnlyMultiDeserializer",
    "AsymK16V8VOnlyMultiSerializer",
    "CorruptEncodedKVError",
    "EncodedKVHeader",
    "PayloadLocation",
    "ScaleScope",
    "crc32_combine",
    "create_asym_k16_v8",
    "create_asym_k16_v8_v_only",
    "dtype_from_id",
    "dtype_to_id",
    "estimate_blob_size",
    "locate_payload",
    "parse_scale_scope",
    "per_tensor_scale",
]
