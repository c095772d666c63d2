"""Try the ``s3`` adapter on this machine, without an AWS account: store one KV chunk, load it.

Starts moto's S3 server on a loopback port (:class:`lmserde_s3.local_server.LocalS3Server`, in a
child process), creates a bucket, gives this process throwaway credentials (moto accepts any;
your own AWS files and instance roles are never read), stores one KV chunk through
``create_l2_adapter({"type": "s3", ...})``, loads it back into L1, checks it is bit-exact,
prints what happened and stops the server. Exit code 0 when the chunk came back unchanged.

Needs core, lmserde-s3 and moto's server (the ``test`` extra)::

    pip install -c constraints.txt ./core "./plugins/s3[test]"
    python plugins/s3/examples/try_locally.py [--serde '{"type": "fp8"}']

Against a real service, drop the server and the credentials: the spec is the same with your
bucket and ``endpoint_url`` (none for AWS), and credentials come from the standard chain.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
from lmserde import MemoryLayoutDesc, ObjectKey
from lmserde.l1 import L1Error, L1Manager
from lmserde.l2 import create_l2_adapter, load_sync, store_sync
from lmserde_s3.local_server import TEST_CREDENTIALS, LocalS3Server

BUCKET = "kv-cache"
#: Variables that would point boto3 at a real account or endpoint instead of the local server.
_REAL_AWS_VARIABLES = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN",
                       "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_REGION")


def use_throwaway_credentials(empty_dir: Path) -> None:
    """This process talks to the local server only: moto's test credentials in the environment
    (the first link of boto3's chain), no profile, no shared AWS files, no instance metadata."""
    for name in _REAL_AWS_VARIABLES:
        os.environ.pop(name, None)
    os.environ.update(TEST_CREDENTIALS)
    os.environ["AWS_CONFIG_FILE"] = str(empty_dir / "config")
    os.environ["AWS_SHARED_CREDENTIALS_FILE"] = str(empty_dir / "credentials")
    os.environ["AWS_EC2_METADATA_DISABLED"] = "true"


def round_trip(endpoint_url: str, serde: Any) -> bool:
    """Store one bf16 KV chunk in ``BUCKET`` and load it back; whether it came back bit-exact
    (lossless serdes) or within 10 % (lossy ones)."""
    spec: dict[str, Any] = {"type": "s3", "bucket": BUCKET, "endpoint_url": endpoint_url}
    if serde is not None:
        spec["serde"] = serde
    print("adapter spec:", json.dumps(spec))
    l1 = L1Manager(capacity_bytes=64 << 20)
    adapter = create_l2_adapter(spec, l1)
    try:
        layout = MemoryLayoutDesc([[16, 2, 8, 128]], [torch.bfloat16])  # tokens, K/V, heads, dims
        key = ObjectKey(chunk_hash=b"chunk-0001", model_name="llama-3-8b", kv_rank=0,
                        object_group_id=0, cache_salt="")
        kv = torch.randn(16, 2, 8, 128).to(torch.bfloat16)

        error, obj = l1.reserve_write([key], False, layout)[key]
        assert error is L1Error.SUCCESS, error
        obj.get_tensor(0).copy_(kv)
        l1.finish_write_and_reserve_read([key])
        stored = store_sync(adapter, [key], [obj])
        print(f"stored {stored.bytes_transferred()} bytes for a {layout.nbytes}-byte chunk; "
              f"objects in the bucket: {len(adapter.list_l2_keys())}")
        l1.finish_read([key])
        l1.delete([key])  # only the S3 copy is left

        error, dst = l1.reserve_write([key], False, layout)[key]
        assert error is L1Error.SUCCESS, error
        hits = load_sync(adapter, [key], [dst])
        back = dst.get_tensor(0).clone()
        l1.finish_write([key])
        if hits.to_list() != [True]:
            print("loaded: miss")
            return False
        if torch.equal(back, kv):
            print("loaded it back: bit-exact")
            return True
        error_rel = float((back.float() - kv.float()).norm() / kv.float().norm())
        print(f"loaded it back: relative error {error_rel:.2%}")
        return error_rel < 0.1
    finally:
        adapter.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--serde", type=json.loads, default=None,
                        help='a serde config (JSON) for the adapter, e.g. \'{"type": "fp8"}\'')
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="lmserde-s3-try-") as empty:
        use_throwaway_credentials(Path(empty))
        with LocalS3Server() as server:
            server.create_bucket(BUCKET)
            print(f"moto S3 server on {server.endpoint_url}, bucket {BUCKET!r} created")
            ok = round_trip(server.endpoint_url, args.serde)
        print("server stopped")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
