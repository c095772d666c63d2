"""Two processes share one Redis: one stores through aesgcm, another one loads.

The reading process decrypts what the writer stored for the same tenant; another tenant, or a
process holding a different master key, gets misses (never the other tenant's data).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from lmserde_redis.local_server import LocalRedisServer

HERE = Path(__file__).parent
COUNT = 3


def _run_peer(*args: str) -> Any:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, str(HERE / "redis_peer.py"), *args], env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"peer process failed:\n{done.stdout}\n{done.stderr}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def _key_file(path: Path, seed: int) -> str:
    path.write_bytes(bytes((seed + i) % 256 for i in range(32)))
    path.chmod(0o600)
    return str(path)


def test_one_process_stores_another_loads(redis_server: LocalRedisServer, tmp_path: Path,
                                          namespace: str) -> None:
    pytest.importorskip("lmserde_aesgcm", reason="needs the aesgcm serde plugin")
    fleet_key = _key_file(tmp_path / "fleet.key", 1)
    other_fleet_key = _key_file(tmp_path / "other.key", 2)
    stored = _run_peer("store", redis_server.url, namespace, fleet_key, "tenant-a", str(COUNT))
    assert stored["stored"] is True and stored["bytes"] > 0

    same, other_tenant, other_key = _run_peer(
        "load", redis_server.url, namespace, str(COUNT),
        f"{fleet_key}:tenant-a", f"{fleet_key}:tenant-b", f"{other_fleet_key}:tenant-a")
    assert same == {"hits": [True] * COUNT, "equal": [True] * COUNT}
    assert other_tenant["hits"] == [False] * COUNT and not any(other_tenant["equal"])
    assert other_key["hits"] == [False] * COUNT and not any(other_key["equal"])
