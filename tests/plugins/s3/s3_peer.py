"""A separate process that stores into, or loads from, a shared bucket (run by the tests).

    python s3_peer.py store ENDPOINT BUCKET KEY_FILE SALT COUNT
    python s3_peer.py load  ENDPOINT BUCKET COUNT KEY_FILE:SALT [KEY_FILE:SALT ...]

Objects are generated from their tenant and index (seeded), so the loader knows what the storer
wrote and tenants sharing chunk hashes store different data.
Prints one JSON line: ``{"stored": bool, "bytes": n}`` or, per attempt,
``{"hits": [...], "equal": [...]}``.
"""

from __future__ import annotations

import json
import sys
import zlib
from typing import Any

from lmserde.l1 import L1Manager
from lmserde.l2 import create_l2_adapter, load_sync, store_sync
from s3_kv import kv_object, make_key, same_bytes, sentinel


def seed(salt: str, i: int) -> int:
    """Each tenant stores different data under the same chunk hashes."""
    return zlib.crc32(salt.encode()) % 10_000 * 100 + i


def _adapter(endpoint: str, bucket: str, key_file: str) -> Any:
    return create_l2_adapter(
        {"type": "s3", "bucket": bucket, "endpoint_url": endpoint,
         "serde": {"type": "aesgcm", "master_key_path": key_file}},
        L1Manager(64 << 20),
    )


def store(endpoint: str, bucket: str, key_file: str, salt: str, count: int) -> dict[str, Any]:
    adapter = _adapter(endpoint, bucket, key_file)
    try:
        keys = [make_key(i, salt=salt) for i in range(count)]
        result = store_sync(adapter, keys, [kv_object(seed(salt, i)) for i in range(count)])
        return {"stored": result.is_successful(), "bytes": result.bytes_transferred()}
    finally:
        adapter.close()


def load(endpoint: str, bucket: str, count: int, attempts: list[str]) -> list[dict[str, Any]]:
    results = []
    for attempt in attempts:
        key_file, _, salt = attempt.rpartition(":")
        adapter = _adapter(endpoint, bucket, key_file)
        try:
            keys = [make_key(i, salt=salt) for i in range(count)]
            outs = [sentinel() for _ in keys]
            bitmap = load_sync(adapter, keys, outs)
            results.append({"hits": bitmap.to_list(),
                            "equal": [same_bytes(o, kv_object(seed(salt, i)))
                                      for i, o in enumerate(outs)]})
        finally:
            adapter.close()
    return results


def main(argv: list[str]) -> int:
    if argv[0] == "store":
        endpoint, bucket, key_file, salt, count = argv[1:6]
        print(json.dumps(store(endpoint, bucket, key_file, salt, int(count))))
    else:
        endpoint, bucket, count, *attempts = argv[1:]
        print(json.dumps(load(endpoint, bucket, int(count), attempts)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
