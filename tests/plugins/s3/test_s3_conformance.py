"""The public L2 adapter conformance kit (``lmserde.testing``) against ``s3`` on a real server."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import new_bucket
from lmserde.testing import L2AdapterConformance
from lmserde_s3.local_server import LocalS3Server


class TestS3AdapterConformance(L2AdapterConformance):
    """Every check of the kit, each on a fresh bucket of the session's moto server."""

    @pytest.fixture(autouse=True)
    def _server(self, s3_server: LocalS3Server,
                make_s3_adapter: Callable[..., Any]) -> None:
        self._make = lambda: make_s3_adapter(bucket=new_bucket(s3_server))

    def make_adapter(self, tmp_path: Path) -> Any:
        return self._make()
