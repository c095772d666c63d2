"""A separate process that stores into, or loads from, a shared Redis (run by the tests).

    python redis_peer.py store URL NAMESPACE KEY_FILE SALT COUNT
    python redis_peer.py load  URL NAMESPACE COUNT KEY_FILE:SALT [KEY_FILE:SALT ...]

Objects are generated from their index (seeded), so the loader knows what the storer wrote.
Prints one JSON line: ``{"stored": bool, "bytes": n}`` or, per attempt,
``{"hits": [...], "equal": [...]}``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from lmserde.l1 import L1Manager
from lmserde.l2 import create_l2_adapter, load_sync, store_sync
from redis_kv import kv_object, make_key, same_bytes, sentinel


def _adapter(url: str, namespace: str, key_file: str) -> Any:
    return create_l2_adapter(
        {"type": "redis", "url": url, "namespace": namespace,
         "serde": {"type": "aesgcm", "master_key_path": key_file}},
        L1Manager(64 << 20),
    )


def store(url: str, namespace: str, key_file: str, salt: str, count: int) -> dict[str, Any]:
    adapter = _adapter(url, namespace, key_file)
    try:
        keys = [make_key(i, salt=salt) for i in range(count)]
        result = store_sync(adapter, keys, [kv_object(i) for i in range(count)])
        return {"stored": result.is_successful(), "bytes": result.bytes_transferred()}
    finally:
        adapter.close()


def load(url: str, namespace: str, count: int, attempts: list[str]) -> list[dict[str, Any]]:
    results = []
    for attempt in attempts:
        key_file, _, salt = attempt.rpartition(":")
        adapter = _adapter(url, namespace, key_file)
        try:
            keys = [make_key(i, salt=salt) for i in range(count)]
            outs = [sentinel() for _ in keys]
            bitmap = load_sync(adapter, keys, outs)
            results.append({"hits": bitmap.to_list(),
                            "equal": [same_bytes(o, kv_object(i)) for i, o in enumerate(outs)]})
        finally:
            adapter.close()
    return results


def main(argv: list[str]) -> int:
    if argv[0] == "store":
        url, namespace, key_file, salt, count = argv[1:6]
        print(json.dumps(store(url, namespace, key_file, salt, int(count))))
    else:
        url, namespace, count, *attempts = argv[1:]
        print(json.dumps(load(url, namespace, int(count), attempts)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
