"""Golden vectors for frame versions 1, 2 and 3 and key ids (also in docs/formats/aesgcm.md).

Each vector is checked three ways: the independent reference (hand-written HKDF and GCM, see
aesgcm_reference.py) reproduces the literal bytes, the plugin's serializer writes them given the
same IV, and the plugin's deserializer decrypts them.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import torch
from aesgcm_objects import buffer, byte_obj, obj_bytes
from aesgcm_reference import (
    gcm_encrypt,
    hkdf_sha256,
    key_id,
    tenant_key,
    v1_frame,
    v2_associated_data,
    v2_frame,
    v3_frame,
)
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from lmserde import ObjectKey, TensorMemoryObj
from lmserde_aesgcm import (
    AesGcmDeserializer,
    AesGcmSerializer,
    HkdfKeyProvider,
    Keyring,
    KeyringKeyProvider,
    TenantKeys,
    derive_key,
)
from lmserde_aesgcm import key_id as plugin_key_id

MASTER = bytes(range(32))
IV_A = bytes.fromhex("000102030405060708090a0b")
IV_B = bytes.fromhex("ffeeddccbbaa998877665544")
PLAINTEXT = b"KV chunk bytes: \x00\x01\x02\xfe\xff" + bytes(range(0x40, 0x58))
RING_SECRET = bytes.fromhex("5a" * 16)

KEY_ALICE = ObjectKey(
    bytes.fromhex("00112233445566778899aabbccddeeff"), "meta-llama/Llama-3.1-8B", 0x01010000, 1,
    "alice",
)
KEY_DEFAULT = ObjectKey(b"\x07" * 3, "m", 0, 0, "")

TENANT_KEYS = {
    ("", 16): "f6b3e40f45eef1b66d8858df666638df",
    ("alice", 32): "29b54edc8538209796c4f8c15a0a7bec3f7bb197b06a5c2e1912baf5522cf13e",
}

# (name, frame hex, aes_bits, key object, iv, plaintext, provider)
V1_EMPTY_SALT_128 = (
    "01000102030405060708090a0b90103821e3360d025eca226c186b289867a0603d428ab588eb94bef5a9f565"
    "51111fafa69ff1f44b2fbbe51fc3ad1e1520b3ce12d81f1a3252d31a8283"
)
V1_ALICE_256 = (
    "01000102030405060708090a0bc6141ea2bc42473ccf7bab09de46bd1257bf81a7de9313c32bd8d30edef954"
    "b1540b664ff337e0e90ef8c0a3a067702b64778842ff9b405658d62801b0"
)
V2_ALICE_256_HKDF = (
    "020200000000000000000000002d000102030405060708090a0bc6141ea2bc42473ccf7bab09de46bd1257bf"
    "81a7de9313c32bd8d30edef954b1540b664ff337e0e90ef8c0a3a0c085fb8b001cdde2183f85f285d470fe"
)
V2_DEFAULT_128_KEYRING_V7 = (
    "0201000000070000000000000005ffeeddccbbaa998877665544bd8b1acaa451e84b54b0acf43e1b92e6be7f"
    "e37440"
)


V3_ALICE_256_HKDF = (
    "0302000000002f4368ba673a06a2000000000000002d000102030405060708090a0bc6141ea2bc42473ccf7b"
    "ab09de46bd1257bf81a7de9313c32bd8d30edef954b1540b664ff337e0e90ef8c0a3a03ff0569de76c867a89"
    "fc277162d4ea17"
)
V3_DEFAULT_128_KEYRING_V7 = (
    "030100000007ebff7bf9be08bd470000000000000005ffeeddccbbaa998877665544bd8b1acaa465c0a62d2a"
    "0bbe5081792f9fa3434c1f"
)
# (root secret, tenant, version) -> key id
KEY_IDS = {
    (MASTER, "alice", 0): "2f4368ba673a06a2",
    (MASTER, "", 0): "6581eac0b190517e",
    (RING_SECRET, "", 7): "ebff7bf9be08bd47",
}


def _keyring_provider() -> KeyringKeyProvider:
    return KeyringKeyProvider(Keyring({"": TenantKeys(current=7, secrets={7: RING_SECRET})}))


def test_reference_gcm_agrees_with_cryptography() -> None:
    """Guards the hand-written reference itself against random inputs."""
    for key_len in (16, 32):
        for n in (0, 1, 15, 16, 17, 45):
            k, iv, p, a = os.urandom(key_len), os.urandom(12), os.urandom(n), os.urandom(n // 2)
            ct, tag = gcm_encrypt(k, iv, p, a)
            assert ct + tag == AESGCM(k).encrypt(iv, p, a)
    ikm = os.urandom(32)
    expected = HKDF(hashes.SHA256(), 32, None, b"info").derive(ikm)
    assert hkdf_sha256(ikm, b"info", 32) == expected


@pytest.mark.parametrize(("tenant", "key_len"), sorted(TENANT_KEYS))
def test_tenant_keys(tenant: str, key_len: int) -> None:
    expected = bytes.fromhex(TENANT_KEYS[(tenant, key_len)])
    assert tenant_key(MASTER, tenant, key_len) == expected
    assert derive_key(MASTER, tenant, key_len) == expected


VECTORS = [
    pytest.param(V1_EMPTY_SALT_128, 1, 128, ObjectKey(b"any", "any", 0, 0, ""), IV_A, PLAINTEXT,
                 "hkdf", id="v1-empty-salt-aes128"),
    pytest.param(V1_ALICE_256, 1, 256, KEY_ALICE, IV_A, PLAINTEXT, "hkdf", id="v1-alice-aes256"),
    pytest.param(V2_ALICE_256_HKDF, 2, 256, KEY_ALICE, IV_A, PLAINTEXT, "hkdf",
                 id="v2-alice-aes256-hkdf"),
    pytest.param(V2_DEFAULT_128_KEYRING_V7, 2, 128, KEY_DEFAULT, IV_B, PLAINTEXT[:5], "keyring",
                 id="v2-default-aes128-keyring-v7"),
    pytest.param(V3_ALICE_256_HKDF, 3, 256, KEY_ALICE, IV_A, PLAINTEXT, "hkdf",
                 id="v3-alice-aes256-hkdf"),
    pytest.param(V3_DEFAULT_128_KEYRING_V7, 3, 128, KEY_DEFAULT, IV_B, PLAINTEXT[:5], "keyring",
                 id="v3-default-aes128-keyring-v7"),
]


@pytest.mark.parametrize(("secret", "tenant", "version"), sorted(KEY_IDS))
def test_key_ids(secret: bytes, tenant: str, version: int) -> None:
    expected = bytes.fromhex(KEY_IDS[(secret, tenant, version)])
    assert key_id(secret, tenant, version) == expected
    assert plugin_key_id(secret, tenant, version) == expected


def _reference(frame_version: int, aes_bits: int, key: ObjectKey, iv: bytes, plaintext: bytes,
               provider: str) -> bytes:
    if frame_version == 1:
        return v1_frame(MASTER, key.cache_salt, aes_bits // 8, iv, plaintext)
    secret, version = (MASTER, 0) if provider == "hkdf" else (RING_SECRET, 7)
    build = v2_frame if frame_version == 2 else v3_frame
    return build(secret, aes_bits // 8, version, iv, plaintext, chunk_hash=key.chunk_hash,
                    model_name=key.model_name, kv_rank=key.kv_rank,
                    object_group_id=key.object_group_id, cache_salt=key.cache_salt)


def _provider(name: str) -> HkdfKeyProvider | KeyringKeyProvider:
    return HkdfKeyProvider(MASTER) if name == "hkdf" else _keyring_provider()


@pytest.mark.parametrize(("hex_frame", "version", "bits", "key", "iv", "plaintext", "provider"),
                         VECTORS)
def test_reference_reproduces_vector(hex_frame: str, version: int, bits: int, key: ObjectKey,
                                     iv: bytes, plaintext: bytes, provider: str) -> None:
    assert _reference(version, bits, key, iv, plaintext, provider).hex() == hex_frame


@pytest.mark.parametrize(("hex_frame", "version", "bits", "key", "iv", "plaintext", "provider"),
                         VECTORS)
def test_serializer_writes_vector(hex_frame: str, version: int, bits: int, key: ObjectKey,
                                  iv: bytes, plaintext: bytes, provider: str) -> None:
    ser = AesGcmSerializer(_provider(provider), aes_bits=bits, frame_version=version,
                           iv_source=lambda: iv)
    dst = buffer(len(hex_frame) // 2 + 10, fill=0xEE)
    n = ser.serialize(byte_obj(plaintext), dst, key)
    assert n == len(hex_frame) // 2
    assert obj_bytes(dst)[:n].hex() == hex_frame
    assert obj_bytes(dst)[n:] == b"\xee" * 10


@pytest.mark.parametrize(("hex_frame", "version", "bits", "key", "iv", "plaintext", "provider"),
                         VECTORS)
def test_deserializer_reads_vector(hex_frame: str, version: int, bits: int, key: ObjectKey,
                                   iv: bytes, plaintext: bytes, provider: str) -> None:
    de = AesGcmDeserializer(_provider(provider), aes_bits=bits)
    out = buffer(len(plaintext))
    de.deserialize(byte_obj(bytes.fromhex(hex_frame)), out, key)
    assert obj_bytes(out) == plaintext


def test_v2_reads_with_suite_from_header_regardless_of_aes_bits() -> None:
    """A v2 frame names its suite, so a reader configured for AES-128 reads an AES-256 frame."""
    de = AesGcmDeserializer(HkdfKeyProvider(MASTER), aes_bits=128)
    out = buffer(len(PLAINTEXT))
    de.deserialize(byte_obj(bytes.fromhex(V2_ALICE_256_HKDF)), out, KEY_ALICE)
    assert obj_bytes(out) == PLAINTEXT


def test_typed_source_is_encrypted_as_its_raw_bytes() -> None:
    values = torch.arange(12, dtype=torch.bfloat16)
    src = TensorMemoryObj.from_tensor(values)
    ser = AesGcmSerializer(HkdfKeyProvider(MASTER), frame_version=1, iv_source=lambda: IV_A)
    dst = buffer(24 + 29)
    ser.serialize(src, dst, ObjectKey(b"x", "m", 0, 0, ""))
    raw = values.view(torch.uint8).numpy().tobytes()
    assert obj_bytes(dst) == v1_frame(MASTER, "", 16, IV_A, raw)


def test_vectors_printed_in_the_format_spec() -> None:
    """docs/formats/aesgcm.md prints every vector; keep the page and the tests in step."""
    doc = Path(__file__).resolve().parents[3] / "docs" / "formats" / "aesgcm.md"
    raw_blocks = re.findall(r"```\n(.*?)```", doc.read_text(), flags=re.DOTALL)
    blocks = ["".join(block.split()) for block in raw_blocks]
    for vector in (V1_EMPTY_SALT_128, V1_ALICE_256, V2_ALICE_256_HKDF, V2_DEFAULT_128_KEYRING_V7,
                   V3_ALICE_256_HKDF, V3_DEFAULT_128_KEYRING_V7, *KEY_IDS.values(),
                   *TENANT_KEYS.values(), PLAINTEXT.hex()):
        assert any(vector in block for block in blocks), f"{vector[:24]}... missing from {doc}"
    aad = v2_associated_data(bytes.fromhex(V2_ALICE_256_HKDF)[:26], KEY_ALICE.chunk_hash,
                             KEY_ALICE.model_name, KEY_ALICE.kv_rank, KEY_ALICE.object_group_id,
                             KEY_ALICE.cache_salt)
    aad_block = next(b for b in raw_blocks if b.startswith("0202") and "model_name" in b)
    printed = "".join(token for token in aad_block.split()
                      if re.fullmatch(r"(?:[0-9a-f]{2})+", token))
    assert printed == aad.hex()
