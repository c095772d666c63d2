"""Public conformance kit for serde authors (see docs/writing-a-plugin.md).

Usage::

    from lmserde.testing import SerdeConformance

    class TestMySerde(SerdeConformance):
        serde_type = "mine"
        serde_kwargs = {"level": 3}
"""

from lmserde.testing.kit import (
    DEFAULT_KV_LAYOUTS,
    DEFAULT_LAYOUTS,
    TIMEOUT_SECONDS,
    MultiSerdeConformance,
    SerdeConformance,
    random_object,
    wait_for_result,
)

__all__ = [
    "DEFAULT_KV_LAYOUTS",
    "DEFAULT_LAYOUTS",
    "TIMEOUT_SECONDS",
    "MultiSerdeConformance",
    "SerdeConformance",
    "random_object",
    "wait_for_result",
]
