"""Fixtures of the s3 adapter tests: a real S3-compatible server (moto) on a loopback port.

moto is a test dependency (``moto[server]``); without it these tests fail (never skip) with the
install hint. Clients get throwaway credentials through the environment (the first link of the
standard provider chain); the developer's own AWS files and instance metadata are never read.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from lmserde.l2 import create_l2_adapter
from lmserde.testing import use_test_aws_environment
from lmserde_s3.local_server import LocalS3Server, MotoNotInstalledError

_buckets = itertools.count()


@pytest.fixture(autouse=True)
def aws_environment(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
                    ) -> None:
    """Test credentials in the environment; no profile, no real config files, no IMDS."""
    use_test_aws_environment(monkeypatch, tmp_path_factory.getbasetemp() / "no-aws-files")


def _server() -> LocalS3Server:
    try:
        return LocalS3Server()
    except MotoNotInstalledError as exc:
        pytest.fail(f"the s3 adapter tests need a real S3-compatible server: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def s3_server() -> Iterator[LocalS3Server]:
    """One server shared by the tests that do not stop it (each test uses its own bucket)."""
    server = _server().start()
    yield server
    server.stop()


@pytest.fixture
def own_s3_server() -> Iterator[LocalS3Server]:
    """A server this test may kill, pause or restart."""
    server = _server().start()
    yield server
    server.stop()


def new_bucket(server: LocalS3Server) -> str:
    name = f"lmserde-test-{next(_buckets)}"
    server.create_bucket(name)
    return name


@pytest.fixture
def bucket(s3_server: LocalS3Server) -> str:
    """A bucket no other test uses."""
    return new_bucket(s3_server)


@pytest.fixture
def make_s3_adapter(s3_server: LocalS3Server, bucket: str) -> Iterator[Callable[..., Any]]:
    """``make(l1=None, **spec_fields)``: an ``s3`` adapter on the shared server and this test's
    bucket unless the fields say otherwise (closed after the test)."""
    adapters: list[Any] = []

    def make(l1: Any = None, **fields: Any) -> Any:
        spec = {"type": "s3", "bucket": bucket, "endpoint_url": s3_server.endpoint_url, **fields}
        adapter = create_l2_adapter(spec, l1)
        adapters.append(adapter)
        return adapter

    yield make
    for adapter in adapters:
        adapter.close()


def raw_client(server: LocalS3Server) -> Any:
    """A plain boto3 client of ``server`` (to look at or tamper with objects directly)."""
    import boto3
    from botocore.config import Config

    return boto3.client("s3", endpoint_url=server.endpoint_url,
                        config=Config(s3={"addressing_style": "path"}))


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "master.key"
    path.write_bytes(bytes(range(32)))
    path.chmod(0o600)
    return path
