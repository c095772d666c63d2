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
"""

from lmserde.testing.adapter_kit import ADAPTER_TIMEOUT_SECONDS, L2AdapterConformance, adapter_key
from lmserde.testing.golden import GOLDEN_TIMEOUT_SECONDS, check_golden_objects, write_golden_objects
from lmserde.testing.golden_case import DEFAULT_GOLDEN_KEY, KEY_DIR, GoldenCase, GoldenObjectError
from lmserde.testing.kit import (
    DEFAULT_KV_LAYOUTS,
    DEFAULT_LAYOUTS,
    TIMEOUT_SECONDS,
    MultiSerdeConformance,
    SerdeConformance,
    random_object,
    wait_for_result,
)
from lmserde.testing.slow_network import TimedTask, TrickleProxy, timed_task

__all__ = [
    "ADAPTER_TIMEOUT_SECONDS",
    "L2AdapterConformance",
    "adapter_key",
    "DEFAULT_GOLDEN_KEY",
    "DEFAULT_KV_LAYOUTS",
    "DEFAULT_LAYOUTS",
    "GOLDEN_TIMEOUT_SECONDS",
    "GoldenCase",
    "GoldenObjectError",
    "KEY_DIR",
    "TIMEOUT_SECONDS",
    "MultiSerdeConformance",
    "SerdeConformance",
    "TimedTask",
    "TrickleProxy",
    "random_object",
    "check_golden_objects",
    "timed_task",
    "wait_for_result",
    "write_golden_objects",
]
