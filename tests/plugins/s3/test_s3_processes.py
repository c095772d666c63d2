"""Two processes share one bucket with aesgcm tenants: each tenant reads only its own objects.

Both processes run at once: tenant A's writer and tenant B's writer store the same chunk hashes
into the same bucket; then readers load. A reader of tenant A decrypts A's data; reading A's keys
as tenant B (other salt) or with another fleet key gets misses, never the other tenant's data.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from lmserde_s3.local_server import LocalS3Server

HERE = Path(__file__).parent
COUNT = 3


def _peer(*args: str) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
    return subprocess.Popen([sys.executable, str(HERE / "s3_peer.py"), *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _result(process: subprocess.Popen[str]) -> Any:
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, f"peer process failed:\n{out}\n{err}"
    return json.loads(out.strip().splitlines()[-1])


def _key_file(path: Path, seed: int) -> str:
    path.write_bytes(bytes((seed + i) % 256 for i in range(32)))
    path.chmod(0o600)
    return str(path)


def test_two_processes_share_a_bucket_and_tenants_stay_apart(
    s3_server: LocalS3Server, bucket: str, tmp_path: Path,
) -> None:
    pytest.importorskip("lmserde_aesgcm", reason="needs the aesgcm serde plugin")
    fleet = _key_file(tmp_path / "fleet.key", 1)
    other_fleet = _key_file(tmp_path / "other.key", 2)
    url = s3_server.endpoint_url
    writers = [_peer("store", url, bucket, fleet, salt, str(COUNT))
               for salt in ("tenant-a", "tenant-b")]
    for writer in writers:
        stored = _result(writer)
        assert stored["stored"] is True and stored["bytes"] > 0

    own_a, own_b, a_as_c, a_other_key = _result(_peer(
        "load", url, bucket, str(COUNT), f"{fleet}:tenant-a", f"{fleet}:tenant-b",
        f"{fleet}:tenant-c", f"{other_fleet}:tenant-a"))
    assert own_a == {"hits": [True] * COUNT, "equal": [True] * COUNT}
    assert own_b == {"hits": [True] * COUNT, "equal": [True] * COUNT}
    assert a_as_c["hits"] == [False] * COUNT and not any(a_as_c["equal"])
    assert a_other_key["hits"] == [False] * COUNT and not any(a_other_key["equal"])
