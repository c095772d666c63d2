"""The public API of ``lmserde.lmcache``: the one table of its lazily loaded exports.

``__init__.py`` hands this stub to ``lazy_loader.attach_stub`` (as ``lmserde`` and every
package of it does); type checkers read the same file. Add a public name here and nowhere
else.
"""

from .conversion import as_lmserde_key as as_lmserde_key
from .conversion import as_lmserde_layout as as_lmserde_layout
from .conversion import as_slot_group as as_slot_group
from .conversion import as_slot_layouts as as_slot_layouts
from .processor_bridge import LMCacheProcessorBridge as LMCacheProcessorBridge
from .registration import DEFAULT_PREFIX as DEFAULT_PREFIX
from .registration import LMCacheRegistration as LMCacheRegistration
from .registration import lmcache_serde_registry as lmcache_serde_registry
from .registration import register_lmserde_serdes as register_lmserde_serdes
