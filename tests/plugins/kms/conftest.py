"""Fixtures of the lmserde-kms tests: moto's KMS on a loopback port, a real boto3 client.

moto is a test dependency (``moto[server]``); without it these tests fail (never skip). Clients
get throwaway credentials through the environment; the developer's AWS files and instance
metadata are never read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from lmserde.testing import LocalMotoServer, MotoNotInstalledError, use_test_aws_environment


@pytest.fixture(autouse=True)
def aws_environment(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
                    ) -> None:
    """Test credentials in the environment; no profile, no real config files, no IMDS."""
    use_test_aws_environment(monkeypatch, tmp_path_factory.getbasetemp() / "no-aws-files")


def _server() -> LocalMotoServer:
    try:
        return LocalMotoServer()
    except MotoNotInstalledError as exc:
        pytest.fail(f"the kms tests need a real KMS-compatible server: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def kms_server() -> Iterator[LocalMotoServer]:
    """One server shared by the tests that do not stop it (each test makes its own key)."""
    server = _server().start()
    yield server
    server.stop()


@pytest.fixture
def own_kms_server() -> Iterator[LocalMotoServer]:
    """A server this test may kill or freeze."""
    server = _server().start()
    yield server
    server.stop()


@pytest.fixture
def make_options(tmp_path: Path) -> Callable[..., dict[str, Any]]:
    """``make(server, alias, **overrides)``: ``key_provider_options`` for a wrapped keyring in
    this test's directory."""

    def make(server: LocalMotoServer, alias: str, **overrides: Any) -> dict[str, Any]:
        return {"key_id": alias, "wrapped_keyring_path": str(tmp_path / "wrapped.json"),
                "endpoint_url": server.endpoint_url, "region": "us-east-1",
                "connect_timeout_s": 1.0, "read_timeout_s": 1.0, "max_attempts": 2,
                "request_deadline_s": 3.0, **overrides}

    return make
