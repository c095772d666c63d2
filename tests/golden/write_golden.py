"""The golden cases of this repository, and the script that writes the missing ones.

``python tests/golden/write_golden.py`` stores every case of :data:`CASES` that ``tests/golden/``
does not hold yet (through the real data path, see :mod:`lmserde.testing.golden`) and leaves
every existing one alone; ``tests/golden/test_golden.py`` reads all of them in every test run.
A golden case is never edited, regenerated or removed: a deliberate format change adds a format
version (the old one stays readable) and new cases here, under new names
(docs/compatibility.md).

Shapes are small but real: a Llama-like KV chunk of 2 layers x 16 tokens x 2 KV heads x 128
head_dim in bf16 (32 KiB). ``turboquant`` needs a power-of-two ``head_dim`` (128 here) and reads
``[2, layers, tokens, heads*head_dim]`` (split K/V) or ``[1, layers, tokens, heads*2*head_dim]``
(fused); ``asym_k16_v8`` reads a two-group (K, V) object of ``[layers, tokens, heads, head_dim]``
each. Key files are test-only secrets derived from fixed labels: never use them for real data.
"""

from __future__ import annotations

import base64
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import torch
from lmserde import MemoryLayoutDesc, ObjectKey
from lmserde.testing import DEFAULT_GOLDEN_KEY, KEY_DIR, GoldenCase, write_golden_objects

GOLDEN_DIR = Path(__file__).resolve().parent / "objects"

#: [K/V, layers, tokens, kv_heads * head_dim]: 2 layers, 16 tokens, 2 heads of 128.
KV = MemoryLayoutDesc([[2, 2, 16, 256]], [torch.bfloat16])
KV_FP16 = MemoryLayoutDesc([[2, 2, 16, 256]], [torch.float16])
KV_FP32 = MemoryLayoutDesc([[2, 2, 16, 128]], [torch.float32])
#: turboquant's fused layout: [1, layers, tokens, kv_heads * (K|V) * head_dim].
KV_FUSED = MemoryLayoutDesc([[1, 2, 16, 512]], [torch.bfloat16])
#: Three groups whose layout encoding (22 bytes) exceeds the frame's inline 20: stored as a digest.
THREE_GROUPS = MemoryLayoutDesc([[1, 1, 16, 128]] * 3, [torch.float16] * 3)
#: Two groups, K then V, of [layers, tokens, kv_heads, head_dim].
KV_PAIR = MemoryLayoutDesc([[2, 16, 2, 128], [2, 16, 2, 128]], [torch.bfloat16, torch.bfloat16])

TENANT = "tenant-a"
TENANT_KEY = ObjectKey(DEFAULT_GOLDEN_KEY.chunk_hash, DEFAULT_GOLDEN_KEY.model_name,
                       DEFAULT_GOLDEN_KEY.kv_rank, 0, TENANT)


def _test_secret(label: str) -> bytes:
    """32 test-only key bytes, fixed by ``label`` (public: never protects anything)."""
    return hashlib.sha256(f"lmserde golden test-only key: {label}".encode()).digest()


def _keyring(current: int, versions: dict[int, str]) -> bytes:
    """A keyring file (lmserde_aesgcm's format) with tenant ``TENANT`` and the empty tenant."""
    keys = {str(v): base64.b64encode(_test_secret(label)).decode() for v, label in versions.items()}
    ring = {"lmserde_aesgcm_keyring": 1,
            "tenants": {TENANT: {"current": current, "keys": keys},
                        "": {"current": current, "keys": keys}}}
    return (json.dumps(ring, indent=2, sort_keys=True) + "\n").encode()


MASTER = {"master.key": _test_secret("hkdf master")}
RING_ONE = {"keyring-v1.json": _keyring(1, {1: "keyring v1"})}
RING_TWO = {"keyring-v1-v2.json": _keyring(2, {1: "keyring v1", 2: "keyring v2"})}
FRAME_KEY = {"frame.key": _test_secret("frame key")}
FRAME_KEY_OPTION = {"frame_key_path": f"{KEY_DIR}/frame.key"}


def _aes(frame_version: int, *, bits: int = 128, ring: dict[str, bytes] | None = None) -> dict[str, Any]:
    """An aesgcm stage with an explicit frame version (a later default must not change a case)."""
    stage: dict[str, Any] = {"type": "aesgcm", "frame_version": frame_version, "aes_bits": bits}
    if ring is None:
        stage["master_key_path"] = f"{KEY_DIR}/master.key"
    else:
        stage["key_provider"] = "keyring"
        stage["keyring_path"] = f"{KEY_DIR}/{next(iter(ring))}"
    return stage


def _tq(preset: str, **extra: Any) -> dict[str, Any]:
    return {"type": "turboquant", "preset": preset, "head_dim": 128, "block_size": 16,
            "skip_first_layers": 0, "skip_last_layers": 0, **extra}


TURBOQUANT_PRESETS = ("turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc",
                      "turboquant_3bit_nc", "tq4", "tq3", "tq2", "tq_k4v3", "tq_k4v2", "tq_k3v2")


def _cases() -> list[GoldenCase]:
    c = GoldenCase
    cases = [
        c("identity-bf16", {"type": "identity"}, KV, seed=1),
        c("identity-three-groups", {"type": "identity"}, THREE_GROUPS, seed=8,
          description="a layout too long to store inline: the frame keeps its digest"),
        c("identity-unframed", {"type": "identity"}, KV, seed=1, frame=False),
        # fp8: every option value that changes the bytes, and the source dtypes it reads
        c("fp8-e4m3-none", {"type": "fp8", "fp8_dtype": "float8_e4m3fn", "scaling": "none"}, KV,
          seed=1),
        c("fp8-e5m2-none", {"type": "fp8", "fp8_dtype": "float8_e5m2", "scaling": "none"}, KV,
          seed=1),
        c("fp8-e4m3-per_tensor", {"type": "fp8", "fp8_dtype": "float8_e4m3fn",
                                  "scaling": "per_tensor"}, KV, seed=1),
        c("fp8-e4m3-per_token", {"type": "fp8", "fp8_dtype": "float8_e4m3fn",
                                 "scaling": "per_token"}, KV, seed=1),
        c("fp8-e5m2-per_token", {"type": "fp8", "fp8_dtype": "float8_e5m2",
                                 "scaling": "per_token"}, KV, seed=1),
        c("fp8-e4m3-none-fp16", {"type": "fp8", "fp8_dtype": "float8_e4m3fn", "scaling": "none"},
          KV_FP16, seed=2),
        c("fp8-e4m3-per_tensor-fp16", {"type": "fp8", "fp8_dtype": "float8_e4m3fn",
                                       "scaling": "per_tensor"}, KV_FP16, seed=2),
        c("fp8-e4m3-per_tensor-fp32", {"type": "fp8", "fp8_dtype": "float8_e4m3fn",
                                       "scaling": "per_tensor"}, KV_FP32, seed=3),
        c("fp8-e4m3-none-unframed", {"type": "fp8", "fp8_dtype": "float8_e4m3fn",
                                     "scaling": "none"}, KV, seed=1, frame=False,
          description="LMCache's fp8 bytes, as an L2 shared with LMCache stores them"),
        # aesgcm: every frame version, both key sizes, hkdf and keyring providers
        c("aesgcm-v1-aes128-hkdf", _aes(1), KV, seed=1, key_files=MASTER),
        c("aesgcm-v1-aes256-hkdf", _aes(1, bits=256), KV, seed=1, key_files=MASTER),
        c("aesgcm-v2-aes128-hkdf", _aes(2), KV, seed=1, key_files=MASTER),
        c("aesgcm-v2-aes256-hkdf", _aes(2, bits=256), KV, seed=1, key_files=MASTER),
        c("aesgcm-v2-keyring-v1-tenant", _aes(2, ring=RING_ONE), KV, seed=1, key=TENANT_KEY,
          key_files=RING_ONE),
        c("aesgcm-v2-keyring-v2-tenant", _aes(2, ring=RING_TWO), KV, seed=1, key=TENANT_KEY,
          key_files=RING_TWO, description="written with key version 2 of a two-version keyring"),
        c("aesgcm-v1-keyring-v1-tenant", _aes(1, ring=RING_ONE), KV, seed=1, key=TENANT_KEY,
          key_files=RING_ONE),
        c("aesgcm-v3-aes128-hkdf", _aes(3), KV, seed=1, key_files=MASTER),
        c("aesgcm-v3-aes256-hkdf", _aes(3, bits=256), KV, seed=1, key_files=MASTER),
        c("aesgcm-v3-keyring-v1-tenant", _aes(3, ring=RING_ONE), KV, seed=1, key=TENANT_KEY,
          key_files=RING_ONE),
        c("aesgcm-v3-keyring-v2-tenant", _aes(3, ring=RING_TWO), KV, seed=1, key=TENANT_KEY,
          key_files=RING_TWO, description="written with key version 2 of a two-version keyring"),
        c("aesgcm-v1-aes128-hkdf-unframed", _aes(1), KV, seed=1, key_files=MASTER, frame=False,
          description="LMCache's aesgcm frame, as an L2 shared with LMCache stores it"),
        # zstd: both codecs, every shuffle, a zstd level, the raw-stored path, other dtypes
        c("zstd-planes-byte-l1", {"type": "zstd", "codec": "planes", "level": 1,
                                  "shuffle": "byte"}, KV, seed=1),
        c("zstd-planes-byte-l3", {"type": "zstd", "codec": "planes", "level": 3,
                                  "shuffle": "byte"}, KV, seed=1),
        c("zstd-planes-none-l1", {"type": "zstd", "codec": "planes", "level": 1,
                                  "shuffle": "none"}, KV, seed=1),
        c("zstd-planes-byte-fp32", {"type": "zstd", "codec": "planes", "level": 1,
                                    "shuffle": "byte"}, KV_FP32, seed=3),
        c("zstd-planes-raw", {"type": "zstd", "codec": "planes", "level": 1, "shuffle": "byte",
                              "min_saving": 0.9}, KV, seed=1,
          description="saves less than min_saving: the input stored raw, flagged in the frame"),
        c("zstd-blosc2-byte-l1", {"type": "zstd", "codec": "blosc2", "level": 1,
                                  "shuffle": "byte"}, KV, seed=1),
        c("zstd-blosc2-bit-l1", {"type": "zstd", "codec": "blosc2", "level": 1,
                                 "shuffle": "bit"}, KV, seed=1),
        c("zstd-blosc2-none-l1", {"type": "zstd", "codec": "blosc2", "level": 1,
                                  "shuffle": "none"}, KV, seed=1),
        # asym_k16_v8: K and V in one object; the split tier's V object
        c("asym_k16_v8", {"type": "asym_k16_v8", "fp8_dtype": "float8_e4m3fn",
                          "scale_scope": "PER_TENSOR", "scale_dtype": "float32"}, KV_PAIR, seed=4),
        c("asym_k16_v8-unframed", {"type": "asym_k16_v8"}, KV_PAIR, seed=4, frame=False,
          description="LMCache's EncodedKV v1 bytes"),
        c("asym_k16_v8_v_only", {"type": "asym_k16_v8_v_only", "fp8_dtype": "float8_e4m3fn",
                                 "scale_scope": "PER_TENSOR", "scale_dtype": "float32",
                                 "k_dtype_tag": "bfloat16"}, KV_PAIR, seed=4,
          description="split tier: K stays in L1; this is the V object the tier stores"),
        c("asym_k16_v8_v_only-ktag-fp16", {"type": "asym_k16_v8_v_only",
                                           "k_dtype_tag": "float16"}, KV_PAIR, seed=4),
        # turboquant: every preset, the raw-layer path, another dtype, the fused layout
        *(c(f"turboquant-{p}", _tq(p), KV, seed=5) for p in TURBOQUANT_PRESETS),
        c("turboquant-tq4-skip-first", _tq("tq4", skip_first_layers=1), KV, seed=5,
          description="layer 0 stored raw (bit-exact), layer 1 compressed"),
        c("turboquant-turboquant_k8v4-fp16", _tq("turboquant_k8v4"), KV_FP16, seed=6),
        c("turboquant-tq3-fused", _tq("tq3"), KV_FUSED, seed=7),
        c("turboquant-tq4-backend-torch", _tq("tq4", backend="torch"), KV, seed=5,
          description="decoded by the torch backend (every backend reads and writes the same bytes)"),
        c("turboquant-turboquant_k8v4-backend-torch", _tq("turboquant_k8v4", backend="torch"), KV,
          seed=5),
        c("turboquant-turboquant_4bit_nc-block8", _tq("turboquant_4bit_nc", block_size=8), KV,
          seed=5),
        # chains the docs advertise
        c("chain-fp8-zstd", [{"type": "fp8", "scaling": "none"},
                             {"type": "zstd", "codec": "planes", "level": 1}], KV, seed=1),
        c("chain-fp8-aesgcm-v2", [{"type": "fp8", "scaling": "none"}, _aes(2)], KV, seed=1,
          key_files=MASTER),
        c("chain-fp8-aesgcm-v1", [{"type": "fp8", "scaling": "none"}, _aes(1)], KV, seed=1,
          key_files=MASTER),
        c("chain-fp8-zstd-aesgcm-v2", [{"type": "fp8", "scaling": "none"},
                                       {"type": "zstd", "codec": "planes", "level": 1},
                                       _aes(2)], KV, seed=1, key_files=MASTER),
        c("chain-zstd-aesgcm-v2", [{"type": "zstd", "codec": "planes", "level": 1}, _aes(2)], KV,
          seed=1, key_files=MASTER),
        c("chain-turboquant-aesgcm-v2", [_tq("turboquant_k8v4"), _aes(2)], KV, seed=5,
          key_files=MASTER),
        c("chain-turboquant-zstd", [_tq("tq3"), {"type": "zstd", "codec": "planes", "level": 1}],
          KV, seed=5),
        c("chain-asym_k16_v8-aesgcm-v2", [{"type": "asym_k16_v8"}, _aes(2)], KV_PAIR, seed=4,
          key_files=MASTER),
        c("chain-identity-aesgcm-v2", [{"type": "identity"}, _aes(2)], KV, seed=1,
          key_files=MASTER),
        # the v2 chains again with frame version 3 (the default since it was added)
        c("chain-fp8-aesgcm-v3", [{"type": "fp8", "scaling": "none"}, _aes(3)], KV, seed=1,
          key_files=MASTER),
        c("chain-fp8-zstd-aesgcm-v3", [{"type": "fp8", "scaling": "none"},
                                       {"type": "zstd", "codec": "planes", "level": 1},
                                       _aes(3)], KV, seed=1, key_files=MASTER),
        c("chain-zstd-aesgcm-v3", [{"type": "zstd", "codec": "planes", "level": 1}, _aes(3)], KV,
          seed=1, key_files=MASTER),
        c("chain-turboquant-aesgcm-v3", [_tq("turboquant_k8v4"), _aes(3)], KV, seed=5,
          key_files=MASTER),
        c("chain-asym_k16_v8-aesgcm-v3", [{"type": "asym_k16_v8"}, _aes(3)], KV_PAIR, seed=4,
          key_files=MASTER),
        c("chain-identity-aesgcm-v3", [{"type": "identity"}, _aes(3)], KV, seed=1,
          key_files=MASTER),
        c("chain-fp8-identity-aesgcm-v1", [{"type": "fp8", "scaling": "none"},
                                           {"type": "identity"}, _aes(1)], KV, seed=1,
          key_files=MASTER),
        # the authenticated stored-object frame (frame version 2): a frame key on the adapter
        c("frame-v2-fp8-keyfile", {"type": "fp8", "scaling": "none"}, KV, seed=6,
          key=TENANT_KEY, key_files=FRAME_KEY, adapter_options=FRAME_KEY_OPTION),
        c("frame-v2-identity-keyring-v2-tenant", {"type": "identity"}, KV, seed=6,
          key=TENANT_KEY, key_files=RING_TWO,
          adapter_options={"frame_keyring_path": f"{KEY_DIR}/keyring-v1-v2.json"}),
        c("frame-v2-digest-layout-keyfile", {"type": "identity"}, THREE_GROUPS, seed=6,
          key_files=FRAME_KEY, adapter_options=FRAME_KEY_OPTION),
        c("frame-v2-chain-fp8-aesgcm-v3-keyfile", [{"type": "fp8", "scaling": "none"}, _aes(3)],
          KV, seed=6, key_files={**MASTER, **FRAME_KEY}, adapter_options=FRAME_KEY_OPTION),
    ]
    return cases


CASES: list[GoldenCase] = _cases()


def main() -> int:
    written = write_golden_objects(GOLDEN_DIR, CASES)
    print(f"{len(written)} new golden case(s) in {GOLDEN_DIR}" + "".join(f"\n  {n}" for n in written))
    print(f"{len(CASES) - len(written)} existing case(s) left as they are")
    return 0


if __name__ == "__main__":
    sys.exit(main())
