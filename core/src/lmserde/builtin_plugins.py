"""What core ships in its own entry-point groups, known without importing those modules.

The modules behind core's entry points import torch; ``lmserde plugins`` lists without importing
anything. The specs take their description from here (one text), and the registries report these
facts for core's own entries when nothing is loaded.
"""

from __future__ import annotations

from dataclasses import dataclass

from lmserde.install_hints import L2_ADAPTER_GROUP, SERDE_GROUP

__all__ = ["BuiltinFacts", "BUILTIN_FACTS", "CORE_DISTRIBUTION_NAME"]

#: The distribution whose entry points are core's own.
CORE_DISTRIBUTION_NAME = "lmserde"


@dataclass(frozen=True)
class BuiltinFacts:
    """A core entry point's description and, for a serde, its size contract and lossiness."""

    description: str
    size_contract: str | None = None
    lossy: bool | None = None


#: group -> entry-point name -> facts.
BUILTIN_FACTS: dict[str, dict[str, BuiltinFacts]] = {
    SERDE_GROUP: {
        "identity": BuiltinFacts("Exact byte copy (baseline; no transform)", "exact", False),
    },
    L2_ADAPTER_GROUP: {
        "memory": BuiltinFacts("In-process L2 store with optional capacity and eviction"),
        "fs": BuiltinFacts("One file per key under base_path; atomic writes; reports stored sizes"),
        "fault": BuiltinFacts("Wraps another adapter and injects seeded faults (testing)"),
    },
}
