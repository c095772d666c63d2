"""The public API of ``lmserde.adaptive``: the one table of its lazily loaded exports.

``__init__.py`` hands this stub to ``lazy_loader.attach_stub`` (as ``lmserde`` and every
package of it does); type checkers read the same file. Add a public name here and nowhere
else.
"""

from .candidates import Candidate as Candidate
from .candidates import admit_candidates as admit_candidates
from .moving_window import MovingRatio as MovingRatio
from .policy import AutoPolicy as AutoPolicy
from .settings import PolicySettings as PolicySettings
