"""``SerdeSizeContract``: how a serializer's output size relates to its estimate.

Re-exported by :mod:`lmserde.spec` (where a spec declares it) and by ``lmserde``.
"""

from __future__ import annotations

import enum

__all__ = ["SerdeSizeContract"]


class SerdeSizeContract(enum.Enum):
    """How ``serialize``'s output size relates to ``estimate_serialized_size``.

    ``EXACT``: every successful serialize writes exactly the estimate. ``UPPER_BOUND``: it may write
    less, so the L2 adapter must report stored sizes (``get_object_sizes``) for loads to work.
    """

    EXACT = "exact"
    UPPER_BOUND = "upper_bound"
