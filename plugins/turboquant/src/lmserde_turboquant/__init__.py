"""lmserde-turboquant: TurboQuant KV-cache compression as an lmserde / LMCache serde.

TurboQuant-MSE (Zandieh et al., 2025) per token and head: store the L2 norm, rotate the unit
vector with a random-sign Walsh-Hadamard transform, quantize each coordinate with the Lloyd-Max
codebook of N(0, 1/D), pack the indices. LMCache's four presets (its byte format; the docs say
how exactly the bytes match) plus ``tq*`` presets that code values the same way. Runs on any torch
device; a native C codec makes the CPU path fast and produces identical bytes.
"""

from lmserde_turboquant.codebook import Codebook, lloyd_max_codebook
from lmserde_turboquant.config import AllRawLayoutWarning, TurboQuantConfig, TurboQuantSerdeConfig
from lmserde_turboquant.kv_layout import KVPlan, plan_kv
from lmserde_turboquant.presets import LMCACHE_PRESET_NAMES, PRESETS, TurboQuantPreset, get_preset
from lmserde_turboquant.rotation import fwht, hadamard_matrix, rotation_signs
from lmserde_turboquant.serde import TurboQuantDeserializer, TurboQuantSerializer
from lmserde_turboquant.spec import TURBOQUANT_SPEC, create_turboquant_processor

__all__ = [
    "AllRawLayoutWarning",
    "Codebook",
    "KVPlan",
    "LMCACHE_PRESET_NAMES",
    "PRESETS",
    "TURBOQUANT_SPEC",
    "TurboQuantConfig",
    "TurboQuantDeserializer",
    "TurboQuantPreset",
    "TurboQuantSerdeConfig",
    "TurboQuantSerializer",
    "create_turboquant_processor",
    "fwht",
    "get_preset",
    "hadamard_matrix",
    "lloyd_max_codebook",
    "plan_kv",
    "rotation_signs",
]
