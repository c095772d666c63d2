"""Each plugin's upstream-style ``create_<type>_processor`` (from ``SerdeSpec.processor_factory``)
builds a working processor of its own type from validated kwargs."""

from __future__ import annotations

import importlib

import pytest
from lmserde import get_serde_spec

FACTORIES = [  # (module, exported factory, serde type)
    ("lmserde_fp8.spec", "create_fp8_processor", "fp8"),
    ("lmserde_zstd", "create_zstd_processor", "zstd"),
    ("lmserde_turboquant", "create_turboquant_processor", "turboquant"),
    ("lmserde_asym_k16_v8", "create_asym_k16_v8", "asym_k16_v8"),
    ("lmserde_asym_k16_v8", "create_asym_k16_v8_v_only", "asym_k16_v8_v_only"),
]


@pytest.mark.parametrize(("module", "name", "serde_type"), FACTORIES)
def test_exported_factory_builds_its_serde(module: str, name: str, serde_type: str) -> None:
    factory = getattr(importlib.import_module(module), name)
    kwargs = get_serde_spec(serde_type).validate(serde_type, {})
    processor = factory(kwargs)
    try:
        assert processor.serde_type == serde_type
        assert processor.max_workers == kwargs["max_workers"]
    finally:
        processor.close()
