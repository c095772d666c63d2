"""Issue #13, case 6: out-of-range turboquant options fail when the config is created."""

from __future__ import annotations

import pytest
from lmserde import create_serde_processor
from lmserde.l1 import L1Manager
from lmserde.l2 import create_l2_adapter
from lmserde_turboquant import TurboQuantConfig
from lmserde_turboquant.config import MAX_BLOCK_SIZE


@pytest.mark.parametrize("options, message", [
    ({"block_size": 10**12}, "'block_size' must be <= 4096"),
    ({"block_size": MAX_BLOCK_SIZE + 1}, "'block_size' must be <="),
    ({"skip_first_layers": 10**9}, "'skip_first_layers' must be <="),
    ({"max_workers": 10**6}, "'max_workers' must be <="),
])
def test_out_of_range_options_fail_at_config_time(options: dict[str, int], message: str,
                                                  tmp_path: object) -> None:
    with pytest.raises(ValueError, match=message):
        create_serde_processor({"type": "turboquant", **options})
    with pytest.raises(ValueError, match=message):
        create_l2_adapter({"type": "memory", "serde": {"type": "turboquant", **options}},
                          L1Manager(1 << 20))


def test_config_object_bounds_block_size() -> None:
    with pytest.raises(ValueError, match="block_size must be <= 4096"):
        TurboQuantConfig(block_size=10**12)
    assert TurboQuantConfig(block_size=MAX_BLOCK_SIZE).block_size == MAX_BLOCK_SIZE


def test_backend_is_not_an_identity_option() -> None:
    configs = []
    for backend in ("torch", "auto"):
        proc = create_serde_processor({"type": "turboquant", "backend": backend})
        configs.append(proc.get_config())
        proc.close()
    assert configs[0] == configs[1]
    assert configs[0]["options"]["block_size"] == 16
