"""Issue #13, case 6: non-finite or out-of-range redis options fail at config time (no server)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from lmserde.l2 import create_l2_adapter


@pytest.mark.parametrize("options, name", [
    ({"socket_timeout": math.inf}, "socket_timeout"),
    ({"socket_timeout": math.nan}, "socket_timeout"),
    ({"socket_timeout": 1e7}, "socket_timeout"),
    ({"connect_timeout": "inf"}, "connect_timeout"),
    ({"ttl_seconds": math.inf}, "ttl_seconds"),
    ({"retries": 10**9}, "retries"),
    ({"io_workers": 10**6}, "io_workers"),
    ({"batch_keys": 2**40}, "batch_keys"),
])
def test_out_of_range_options_fail_before_connecting(options: dict[str, Any], name: str) -> None:
    # the URL points at a port nobody listens on: only validation can answer this fast
    with pytest.raises(ValueError, match=f"'{name}' must be"):
        create_l2_adapter({"type": "redis", "url": "redis://127.0.0.1:1/0", **options})
