"""Serde chains as ``lmserde.l2`` exports them: :class:`ChainStage`, :class:`SerdeChainProcessor`
and :func:`create_serde_chain`, defined in core's :mod:`lmserde.serde_chain`.

``lmserde.l2``'s export stub (``lazy_loader``) names only modules inside the package; this
module is where those three names sit inside it.
"""

from __future__ import annotations

from lmserde.serde_chain import ChainStage, SerdeChainProcessor, create_serde_chain

__all__ = ["ChainStage", "SerdeChainProcessor", "create_serde_chain"]
