"""The ``s3`` adapter type: discovery as a plugin, validation of its spec, no secret in sight."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from lmserde.cli.main import main as lmserde_main
from lmserde.l2 import create_l2_adapter, get_l2_adapter_spec, list_l2_adapters, store_sync
from lmserde_s3 import S3_ADAPTER_SPEC, S3L2Adapter
from lmserde_s3.local_server import LocalS3Server
from s3_kv import kv_object, make_key

SECRET = "wJalrXUtnFEMI-lmserde-secret-sentinel"


def test_discovered_through_the_entry_point_group() -> None:
    assert get_l2_adapter_spec("s3") is S3_ADAPTER_SPEC
    info = {i.name: i for i in list_l2_adapters(load=True)}["s3"]
    assert (info.distribution, info.status, info.error) == ("lmserde-s3", "loaded", None)
    assert info.reports_object_sizes is True


def test_listed_by_lmserde_plugins(capsys: pytest.CaptureFixture[str]) -> None:
    assert lmserde_main(["plugins", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["l2_adapters"]}
    assert rows["s3"]["distribution"] == "lmserde-s3"


def _build(**fields: Any) -> S3L2Adapter:
    adapter = create_l2_adapter({"type": "s3", **fields})
    assert isinstance(adapter, S3L2Adapter)
    return adapter


def test_spec_builds_without_touching_the_network() -> None:
    adapter = _build(bucket="kv-cache", endpoint_url="http://127.0.0.1:1", prefix="prod",
                     max_in_flight=8, read_timeout=2.5,
                     tenant_routes={"tenant-a": {"bucket": "kv-routed"}})
    try:
        status = adapter.report_status()
        assert (status["bucket"], status["prefix"], status["max_in_flight"],
                status["read_timeout"]) == ("kv-cache", "prod/", 8, 2.5)
        assert "tenant-a" not in json.dumps(status, default=str)  # routes show tenant tags only
    finally:
        adapter.close()


@pytest.mark.parametrize(("fields", "message"), [
    ({}, "requires option 'bucket'"),
    ({"bucket": "Bad_Bucket"}, "not a valid bucket name"),
    ({"bucket": "ab"}, "not a valid bucket name"),
    ({"bucket": "10.0.0.1"}, "not a valid bucket name"),
    ({"bucket": "kv", "buckett": "x"}, "Did you mean 'bucket'"),
    ({"bucket": "kvc", "prefix": "/abs"}, "must not start with '/'"),
    ({"bucket": "kvc", "prefix": "a/../b"}, r"'\.\.' path segment"),
    ({"bucket": "kvc", "endpoint_url": "ftp://host"}, "http:// or https://"),
    ({"bucket": "kvc", "endpoint_url": "http://user:pw@host"}, "must not contain credentials"),
    ({"bucket": "kvc", "endpoint_url": "http://host:99999"}, "invalid port"),
    ({"bucket": "kvc", "region": "us east"}, "region"),
    ({"bucket": "kvc", "max_in_flight": 0}, "max_in_flight"),
    ({"bucket": "kvc", "max_in_flight": 5000}, "max_in_flight"),
    ({"bucket": "kvc", "connect_timeout": 0}, "connect_timeout"),
    ({"bucket": "kvc", "read_timeout": float("nan")}, "finite"),
    ({"bucket": "kvc", "read_timeout": float("inf")}, "finite"),
    ({"bucket": "kvc", "read_timeout": "2.5"}, "must be a number"),
    ({"bucket": "kvc", "max_in_flight": "8"}, "must be an integer"),
    ({"bucket": "kvc", "read_timeout": 1e9}, "read_timeout"),
    ({"bucket": "kvc", "max_attempts": 0}, "max_attempts"),
    ({"bucket": "kvc", "max_attempts": 99}, "max_attempts"),
    ({"bucket": "kvc", "retry_mode": "legacy"}, "retry_mode"),
    ({"bucket": "kvc", "addressing_style": "dns"}, "addressing_style"),
    ({"bucket": "kvc", "tenant_routes": ["a"]}, "tenant_routes must be an object"),
    ({"bucket": "kvc", "tenant_routes": {"": {"bucket": "kvd"}}}, "non-empty string"),
    ({"bucket": "kvc", "tenant_routes": {"a": {}}}, "give a 'bucket'"),
    ({"bucket": "kvc", "tenant_routes": {"a": {"bucket": "B!"}}}, "not a valid bucket"),
    ({"bucket": "kvc", "tenant_routes": {"a": {"region": "x"}}}, "unknown field"),
    ({"bucket": "kvc", "profile": "no-such-profile-anywhere"}, "profile"),
])
def test_bad_specs_are_clear_value_errors(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _build(**fields)


def test_credentials_never_appear_in_status_repr_or_logs(
    monkeypatch: pytest.MonkeyPatch, s3_server: LocalS3Server, bucket: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    caplog.set_level(logging.DEBUG)
    adapter = _build(bucket=bucket, endpoint_url=s3_server.endpoint_url)
    try:
        assert store_sync(adapter, [make_key(1)], [kv_object(1)]).is_successful()
        text = json.dumps(adapter.report_status(), default=str) + repr(adapter)
        adapter.delete([make_key(1)])
    finally:
        adapter.close()
    assert SECRET not in text
    assert SECRET not in caplog.text


def test_credentials_come_from_a_named_profile(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, s3_server: LocalS3Server, bucket: str,
) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    credentials = tmp_path / "credentials"
    credentials.write_text("[kv-writer]\naws_access_key_id = AKIDPROFILE\n"
                           f"aws_secret_access_key = {SECRET}\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    adapter = _build(bucket=bucket, endpoint_url=s3_server.endpoint_url, profile="kv-writer")
    try:
        assert adapter.report_status()["credential_source"] == "shared-credentials-file"
        assert store_sync(adapter, [make_key(1)], [kv_object(1)]).is_successful()
        assert SECRET not in json.dumps(adapter.report_status(), default=str)
    finally:
        adapter.close()


def test_no_credentials_fail_each_store_without_crashing(
    monkeypatch: pytest.MonkeyPatch, s3_server: LocalS3Server, bucket: str,
) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    adapter = _build(bucket=bucket, endpoint_url=s3_server.endpoint_url)
    try:
        assert adapter.report_status()["credential_source"] is None
        assert not store_sync(adapter, [make_key(1)], [kv_object(1)]).is_successful()
    finally:
        adapter.close()


def test_upper_bound_serdes_are_accepted_because_sizes_are_reported() -> None:
    pytest.importorskip("lmserde_asym_k16_v8")
    from lmserde.l1 import L1Manager

    adapter = create_l2_adapter({"type": "s3", "bucket": "kv-cache",
                                 "endpoint_url": "http://127.0.0.1:1",
                                 "serde": {"type": "asym_k16_v8"}}, L1Manager(1 << 20))
    try:
        assert adapter.report_status()["serde_wrapped"] is True
    finally:
        adapter.close()
