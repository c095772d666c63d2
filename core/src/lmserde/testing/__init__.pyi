"""The public API of ``lmserde.testing``: the one table of its lazily loaded exports.

``__init__.py`` hands this stub to ``lazy_loader.attach_stub`` (as ``lmserde`` and every
package of it does); type checkers read the same file. Add a public name here and nowhere
else.
"""

from .adapter_kit import ADAPTER_TIMEOUT_SECONDS as ADAPTER_TIMEOUT_SECONDS
from .adapter_kit import L2AdapterConformance as L2AdapterConformance
from .adapter_kit import adapter_key as adapter_key
from .kit import DEFAULT_KV_LAYOUTS as DEFAULT_KV_LAYOUTS
from .kit import DEFAULT_LAYOUTS as DEFAULT_LAYOUTS
from .kit import TIMEOUT_SECONDS as TIMEOUT_SECONDS
from .kit import MultiSerdeConformance as MultiSerdeConformance
from .kit import SerdeConformance as SerdeConformance
from .kit import random_object as random_object
from .kit import wait_for_result as wait_for_result
