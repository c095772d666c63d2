"""The public API of ``lmserde.l1``: the one table of its lazily loaded exports.

``__init__.py`` hands this stub to ``lazy_loader.attach_stub`` (as ``lmserde`` and every
package of it does); type checkers read the same file. Add a public name here and nowhere
else.
"""

from .buffer_pool import BufferPool as BufferPool
from .buffer_pool import BufferPoolStats as BufferPoolStats
from .errors import L1Error as L1Error
from .manager import DEFAULT_POOL_BYTES as DEFAULT_POOL_BYTES
from .manager import DeleteListener as DeleteListener
from .manager import L1Manager as L1Manager
from .manager import L1Result as L1Result
from .manager import WriteListener as WriteListener
