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
"""

from lmserde.testing.adapter_kit import ADAPTER_TIMEOUT_SECONDS, L2AdapterConformance, adapter_key
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
    "DEFAULT_KV_LAYOUTS",
    "DEFAULT_LAYOUTS",
    "TIMEOUT_SECONDS",
    "MultiSerdeConformance",
    "SerdeConformance",
    "TimedTask",
    "TrickleProxy",
    "random_object",
    "timed_task",
    "wait_for_result",
]
