"""lmserde-s3: an S3-compatible object-store L2 adapter for lmserde and LMCache-style KV tiers.

Configured as ``{"type": "s3", "bucket": "kv-cache", "endpoint_url": "http://minio:9000"}``,
optionally with a ``serde``; credentials come from the standard AWS provider chain.
"""

from __future__ import annotations

from lmserde_s3.adapter import S3L2Adapter
from lmserde_s3.object_names import ObjectNamer, salt_tag
from lmserde_s3.settings import S3Location, S3Settings
from lmserde_s3.spec import S3_ADAPTER_SPEC, create_s3_adapter

__all__ = [
    "S3_ADAPTER_SPEC",
    "ObjectNamer",
    "S3L2Adapter",
    "S3Location",
    "S3Settings",
    "create_s3_adapter",
    "salt_tag",
]
