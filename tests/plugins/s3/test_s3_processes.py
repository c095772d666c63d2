"""Two processes share one bucket with aesgcm tenants: each tenant reads only its own objects.

A peer process stores tenant A's objects while this process stores tenant B's under the same
chunk hashes (different data) into the same bucket. Then this process reads: tenant A's objects
(written by the other process) decrypt with the fleet key; each tenant gets its own data; another
fleet key, or a tenant that stored nothing, gets misses, never another tenant's data.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from lmserde_s3.local_server import LocalS3Server

HERE = Path(__file__).parent
COUNT = 3


def _key_file(path: Path, seed: int) -> str:
    path.write_bytes(bytes((seed + i) % 256 for i in range(32)))
    path.chmod(0o600)
    return str(path)


def test_two_processes_share_a_bucket_and_tenants_stay_apart(
    s3_server: LocalS3Server, bucket: str, tmp_path: Path,
) -> None:
    pytest.importorskip("lmserde_aesgcm", reason="needs the aesgcm serde plugin")
    import s3_peer

    fleet = _key_file(tmp_path / "fleet.key", 1)
    other_fleet = _key_file(tmp_path / "other.key", 2)
    url = s3_server.endpoint_url
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
    peer = subprocess.Popen([sys.executable, str(HERE / "s3_peer.py"), "store", url, bucket, fleet,
                             "tenant-a", str(COUNT)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        here = s3_peer.store(url, bucket, fleet, "tenant-b", COUNT)  # meanwhile, in this process
        out, err = peer.communicate(timeout=120)
    finally:
        if peer.poll() is None:
            peer.kill()
            peer.communicate()
    assert peer.returncode == 0, f"peer process failed:\n{out}\n{err}"
    there = json.loads(out.strip().splitlines()[-1])
    assert here["stored"] is True and there["stored"] is True and there["bytes"] > 0

    own_a, own_b, a_as_c, a_other_key = s3_peer.load(
        url, bucket, COUNT, [f"{fleet}:tenant-a", f"{fleet}:tenant-b", f"{fleet}:tenant-c",
                             f"{other_fleet}:tenant-a"])
    assert own_a == {"hits": [True] * COUNT, "equal": [True] * COUNT}
    assert own_b == {"hits": [True] * COUNT, "equal": [True] * COUNT}
    assert a_as_c["hits"] == [False] * COUNT and not any(a_as_c["equal"])
    assert a_other_key["hits"] == [False] * COUNT and not any(a_other_key["equal"])
