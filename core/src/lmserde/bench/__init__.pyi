"""The public API of ``lmserde.bench``: the one table of its lazily loaded exports.

``__init__.py`` hands this stub to ``lazy_loader.attach_stub`` (as ``lmserde`` and every
package of it does); type checkers read the same file. Add a public name here and nowhere
else.
"""

from .breakeven import DEFAULT_TIERS as DEFAULT_TIERS
from .breakeven import Tier as Tier
from .breakeven import break_even_bandwidth as break_even_bandwidth
from .breakeven import load_seconds as load_seconds
from .kv_chunk import KVChunk as KVChunk
from .kv_files import KVFileSource as KVFileSource
from .kv_generators import SyntheticKVGenerator as SyntheticKVGenerator
from .model_shapes import BUILTIN_MODELS as BUILTIN_MODELS
from .model_shapes import DEFAULT_MODEL as DEFAULT_MODEL
from .model_shapes import ModelShape as ModelShape
from .model_shapes import get_model_shape as get_model_shape
from .quality import QualityAccumulator as QualityAccumulator
from .quality import QualityMetrics as QualityMetrics
from .quality import TensorError as TensorError
from .recommend import DEFAULT_MAX_ATTN_ERROR as DEFAULT_MAX_ATTN_ERROR
from .recommend import recommend as recommend
from .report import BenchReport as BenchReport
from .report import Recommendation as Recommendation
from .report import SerdeResult as SerdeResult
from .runner import BenchOptions as BenchOptions
from .runner import run_bench as run_bench
from .serde_selection import BenchInputError as BenchInputError
from .serde_selection import default_serdes as default_serdes
from .serde_selection import parse_serde_arg as parse_serde_arg
