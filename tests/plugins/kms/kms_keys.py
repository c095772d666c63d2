"""Customer master keys on a local moto KMS for the lmserde-kms tests."""

from __future__ import annotations

import itertools
from typing import Any

from lmserde.testing import LocalMotoServer

_aliases = itertools.count()


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
