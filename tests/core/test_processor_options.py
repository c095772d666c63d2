"""``processor_options`` (the two options core's processor reads, declared once) and
``SerdeSpec.processor_factory`` (a plugin's upstream-style ``create_<type>_processor``)."""

from __future__ import annotations

import pytest
from lmserde import SerdeSpec, processor_options
from lmserde.identity import IDENTITY_SPEC
from lmserde.options import DEFAULT_CLOSE_TIMEOUT_S


def test_processor_options_declare_max_workers_and_close_timeout() -> None:
    workers, close = processor_options(max_workers=4, close_timeout_s=2.5)
    assert (workers.name, workers.default, workers.identity) == ("max_workers", 4, False)
    assert (close.name, close.default, close.identity) == ("close_timeout_s", 2.5, False)
    assert [o.default for o in processor_options()] == [1, DEFAULT_CLOSE_TIMEOUT_S]
    spec = SerdeSpec(pair_factory=IDENTITY_SPEC.pair_factory, options=processor_options(3))
    assert spec.workers({}) == 3 and spec.close_timeout({}) == DEFAULT_CLOSE_TIMEOUT_S
    with pytest.raises(ValueError, match="max_workers"):
        spec.validate("t", {"max_workers": 0})


def test_processor_factory_builds_the_specs_processor_under_its_name() -> None:
    create = IDENTITY_SPEC.processor_factory("identity")
    assert create.__name__ == "create_identity_processor" and "identity" in (create.__doc__ or "")
    processor = create(IDENTITY_SPEC.validate("identity", {"max_workers": 2}))
    try:
        assert processor.serde_type == "identity" and processor.max_workers == 2
    finally:
        processor.close()
