"""Fixtures of the lmserde-kms tests: moto's KMS on a loopback port, a real boto3 client.

moto is a test dependency (``moto[server]``); without it these tests fail (never skip). Clients
get throwaway credentials through the environment; the developer's AWS files and instance
metadata are never read.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from lmserde.testing import TEST_CREDENTIALS, LocalMotoServer, MotoNotInstalledError

_aliases = itertools.count()


@pytest.fixture(autouse=True)
def aws_environment(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
                    ) -> None:
    """Test credentials in the environment; no profile, no real config files, no IMDS."""
    empty = tmp_path_factory.getbasetemp() / "no-aws-files"
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL",
                 "AWS_ENDPOINT_URL_KMS", "AWS_REGION", "AWS_CA_BUNDLE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in TEST_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(empty / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(empty / "credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


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


def kms_client(server: LocalMotoServer) -> Any:
    """A plain boto3 KMS client of ``server``."""
    import boto3

    return boto3.client("kms", endpoint_url=server.endpoint_url, region_name="us-east-1")


def new_master_key(server: LocalMotoServer) -> str:
    """A fresh customer master key on ``server``; its alias."""
    client = kms_client(server)
    key_id = client.create_key(Description="lmserde test")["KeyMetadata"]["KeyId"]
    alias = f"alias/lmserde-test-{next(_aliases)}"
    client.create_alias(AliasName=alias, TargetKeyId=key_id)
    return alias


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
