"""Public conformance kits: serdes (docs/writing-a-plugin.md) and L2 adapters (docs/writing-an-adapter.md).

Usage::

    from lmserde.testing import SerdeConformance

    class TestMySerde(SerdeConformance):
        serde_type = "mine"
        serde_kwargs = {"level": 3}

    from lmserde.testing import L2AdapterConformance

    class TestMyAdapter(L2AdapterConformance):
        def make_adapter(self, tmp_path):
            return MyAdapter(tmp_path)

Golden objects (docs/compatibility.md): write stored objects once, read them in every release::

    from lmserde.testing import GoldenCase, check_golden_objects, write_golden_objects

    CASES = [GoldenCase("mine-v1", {"type": "mine", "level": 3}, layout, seed=1)]
    write_golden_objects("tests/golden", CASES)     # once, then commit tests/golden/
    check_golden_objects("tests/golden", CASES)     # in the test suite, every release

Its names are exported lazily, as in every lmserde package: listed once, in
``__init__.pyi``, which ``lazy_loader`` reads at import (a name's module is imported on first
access) and type checkers read too.
"""

from __future__ import annotations

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
