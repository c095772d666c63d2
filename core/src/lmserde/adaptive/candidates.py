"""What the ``auto`` policy chooses among: :class:`Candidate`, and the quality bound that admits
or refuses each one when the policy is configured.

Quality is the bench's attention-weight error (``attn w err`` of ``lmserde bench``, the
``attn_weight_tv`` of :class:`lmserde.bench.QualityMetrics`): the mean total-variation distance
between the softmax attention weights of random queries over the original and the decoded keys —
the share of attention mass a serde moves to other tokens, a fraction in ``[0, 1]``. Serde specs
declare only whether they are lossy (``SerdeSpec.lossy``), not how much, so the number comes from
the configuration (declared by whoever configures ``auto``, from a bench run on their own KV) or
from a measurement (``lmserde bench --policy`` passes what it measured). A lossless candidate's
error is 0 by definition and needs no number.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Candidate", "admit_candidates"]


@dataclass(frozen=True)
class Candidate:
    """One serde configuration ``auto`` may store an object with.

    ``name`` identifies it in metrics and events (unique among a policy's candidates); ``lossy``
    says whether a round trip may change values (a chain is lossy when any stage is);
    ``attention_error`` is its declared or measured attention-weight error (see the module
    docstring), ``None`` when unknown.
    """

    name: str
    lossy: bool
    attention_error: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"a candidate needs a non-empty name, got {self.name!r}")
        err = self.attention_error
        if err is not None and (isinstance(err, bool) or not isinstance(err, (int, float))
                                or not 0.0 <= err <= 1.0 or math.isnan(err)):
            raise ValueError(f"candidate {self.name!r}: attention_error is a fraction in [0, 1], "
                             f"got {err!r}")


def admit_candidates(
    candidates: Sequence[Candidate], max_attention_error: float | None,
) -> tuple[list[int], dict[str, str]]:
    """The indices of the candidates the quality bound admits, and why each other one is refused.

    Every lossless candidate is admitted. With ``max_attention_error`` set, a lossy candidate is
    refused when its ``attention_error`` is above the bound, or unknown (nothing shows that it
    meets it); without a bound every candidate is admitted. ``ValueError`` for no candidates,
    repeated names, a bound outside ``[0, 1]``, or when the bound refuses every candidate (the
    message lists why).
    """
    if not candidates:
        raise ValueError("auto needs at least one candidate")
    names = [c.name for c in candidates]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"candidate names must be unique; repeated: {', '.join(repeated)}")
    bound = max_attention_error
    if bound is not None and (isinstance(bound, bool) or not isinstance(bound, (int, float))
                              or not 0.0 <= bound <= 1.0):
        raise ValueError(f"max_attention_error is a fraction in [0, 1], got {bound!r}")
    admitted: list[int] = []
    refused: dict[str, str] = {}
    for i, c in enumerate(candidates):
        if bound is None or not c.lossy:
            admitted.append(i)
        elif c.attention_error is None:
            refused[c.name] = ("lossy, and its attention error is not known (declare it to allow "
                               f"it under max_attention_error {bound:g})")
        elif c.attention_error > bound:
            refused[c.name] = (f"attention error {c.attention_error:g} is above "
                               f"max_attention_error {bound:g}")
        else:
            admitted.append(i)
    if not admitted:
        raise ValueError("max_attention_error refuses every candidate: "
                         + "; ".join(f"{n}: {why}" for n, why in refused.items()))
    return admitted, refused
