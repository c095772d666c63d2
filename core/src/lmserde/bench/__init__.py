"""``lmserde bench``: which serde should an L2 tier use?

Runs serdes through the real data path (L1 -> serde wrapper -> L2 adapter -> L1) on realistic KV
chunks and reports size, speed, quality and break-even storage bandwidth. Programmatic use::

    from lmserde.bench import BenchOptions, run_bench
    report = run_bench(BenchOptions(serdes=[{"type": "identity"}], model="tiny", chunks=2))
    print(report.to_json()["results"][0]["compression_ratio"])

See ``docs/bench.md`` for the method and every reported field. Names are exported lazily
(listed once, in ``__init__.pyi``, as in every lmserde package), so importing a light submodule
(``model_shapes``, ``breakeven``) does not import torch.
"""

from __future__ import annotations

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
