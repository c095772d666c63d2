"""The ``aesgcm`` serde as published in the ``lmcache.serde`` group: options and factory."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lmserde import (
    DataKind,
    SerdeOption,
    SerdePair,
    SerdeProcessor,
    SerdeSizeContract,
    SerdeSpec,
    close_timeout_option,
    max_workers_option,
)
from lmserde.tenant_keys import DEFAULT_RELOAD_INTERVAL_S, KeyProvider, KeyringKeyProvider

from lmserde_aesgcm.cipher_cache import CipherCache
from lmserde_aesgcm.errors import KeyProviderError
from lmserde_aesgcm.hkdf_provider import HkdfKeyProvider
from lmserde_aesgcm.provider_hooks import resolve_key_provider
from lmserde_aesgcm.serde import (
    DEFAULT_FRAME_VERSION,
    FRAME_VERSIONS,
    AesGcmDeserializer,
    AesGcmSerializer,
)

__all__ = ["SERDE_TYPE", "OPTIONS", "AESGCM_SPEC", "build_key_provider", "create_aesgcm_pair",
           "create_aesgcm_processor"]

SERDE_TYPE = "aesgcm"


def _check_aes_bits(value: int) -> None:
    if value not in (128, 256):
        raise ValueError(f"aes_bits must be one of (128, 256), got {value}")


def _check_frame_version(value: int) -> None:
    if value not in FRAME_VERSIONS:
        raise ValueError(
            f"frame_version must be 1 (LMCache-compatible), 2 (bound to the object key) or 3 "
            f"(bound to the object key, names its key id), got {value}"
        )


def _check_provider_name(value: str) -> None:
    if not value.strip():
        raise ValueError("key_provider must be a non-empty provider name (e.g. 'hkdf')")


def _check_reload_interval(value: float) -> None:
    if not 0 <= value <= 86400:
        raise ValueError(f"keyring_reload_interval_s must be in [0, 86400] seconds, got {value}")


def _check_provider_options(value: Any) -> None:
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise ValueError(
            f"key_provider_options must be a mapping of option name -> value, got "
            f"{type(value).__name__}"
        )


OPTIONS: tuple[SerdeOption, ...] = (
    # aes_bits and frame_version choose how new frames are written; every frame records both and
    # the deserializer reads every version whatever they are now, so they are not identity
    # options (the config identity names no key either: objects of earlier releases keep their
    # config). Switching aes_bits keeps the stored objects readable. Switching frame_version
    # does not, through the serde wrapper: the size is exact (plaintext + 29 for v1, 42 for v2,
    # 50 for v3), so an object of another version has another size than the reader expects and
    # its inner load fails: a miss, counted under failures["inner_load"], the object left in
    # place (nothing is rejected or deleted); switching back reads it again.
    SerdeOption("aes_bits", int, 128, "AES key size for new frames: 128 or 256",
                check=_check_aes_bits, identity=False),
    SerdeOption("key_provider", str, "hkdf",
                "'hkdf' (one master key file), 'keyring' (per-tenant versioned keys) or a name a "
                "hook plugin provides", check=_check_provider_name, identity=False),
    SerdeOption("master_key_path", str, "",
                "hkdf: file holding the raw master key (>= 16 bytes, owner-only permissions)",
                identity=False),
    SerdeOption("keyring_path", str, "",
                "keyring: JSON keyring file (owner-only permissions)", identity=False),
    SerdeOption("keyring_reload_interval_s", float, DEFAULT_RELOAD_INTERVAL_S,
                "keyring: seconds between looks at the keyring file; a changed file (rotated, "
                "retired, forgotten keys) is re-read in the background, 0 reads it once",
                check=_check_reload_interval, identity=False),
    SerdeOption("key_provider_options", object, {},
                "options passed to a hook plugin's key provider", check=_check_provider_options,
                identity=False),
    SerdeOption("allow_insecure_key_permissions", bool, False,
                "accept key files that group or others may read (not recommended)",
                identity=False),
    SerdeOption("frame_version", int, DEFAULT_FRAME_VERSION,
                "frame version written: 3 (default, bound to the object key, names its key id), "
                "2 (bound to the object key) or 1 (readable by LMCache); all are always read",
                check=_check_frame_version, identity=False),
    max_workers_option(1),
    close_timeout_option(),
)


def _refuse_unused(opts: Mapping[str, Any], provider: str, *names: str) -> None:
    for name in names:
        if opts.get(name):
            raise KeyProviderError(
                f"aesgcm serde: option '{name}' is not used by key_provider '{provider}'; "
                "remove it (or pick the provider it belongs to)"
            )


def _required_path(opts: Mapping[str, Any], provider: str, option: str, how: str) -> str:
    """The path option ``option`` that key_provider ``provider`` needs; ``KeyProviderError``
    saying ``how`` to create the file when it is unset or empty."""
    path = str(opts.get(option, ""))
    if not path:
        raise KeyProviderError(f"aesgcm serde '{provider}' requires '{option}' ({how})")
    return path


def build_key_provider(opts: Mapping[str, Any]) -> KeyProvider:
    """The key provider that validated options ``opts`` select."""
    name = str(opts.get("key_provider", "hkdf"))
    insecure = bool(opts.get("allow_insecure_key_permissions", False))
    if name == "hkdf":
        _refuse_unused(opts, name, "keyring_path", "key_provider_options")
        path = _required_path(opts, name, "master_key_path", "create a key with `lmserde keygen PATH`")
        return HkdfKeyProvider.from_file(path, allow_insecure_permissions=insecure)
    if name == "keyring":
        _refuse_unused(opts, name, "master_key_path", "key_provider_options")
        path = _required_path(opts, name, "keyring_path",
                              "create one with `lmserde keygen --keyring PATH --tenant NAME`")
        interval = float(opts.get("keyring_reload_interval_s", DEFAULT_RELOAD_INTERVAL_S))
        return KeyringKeyProvider.from_file(path, allow_insecure_permissions=insecure,
                                            reload_interval_s=interval)
    _refuse_unused(opts, name, "master_key_path", "keyring_path")
    return resolve_key_provider(name, opts.get("key_provider_options") or {})


def create_aesgcm_pair(opts: dict[str, Any]) -> SerdePair:
    """The serializer/deserializer pair for validated options (see :data:`OPTIONS`); both share
    one key provider and cipher cache."""
    aes_bits = int(opts.get("aes_bits", 128))
    _check_aes_bits(aes_bits)
    frame_version = int(opts.get("frame_version", DEFAULT_FRAME_VERSION))
    _check_frame_version(frame_version)
    ciphers = CipherCache(build_key_provider(opts))
    return SerdePair(
        AesGcmSerializer(ciphers, aes_bits=aes_bits, frame_version=frame_version),
        AesGcmDeserializer(ciphers, aes_bits=aes_bits),
    )


def create_aesgcm_processor(opts: dict[str, Any]) -> SerdeProcessor:
    """The processor core builds from :func:`create_aesgcm_pair` for validated options."""
    return AESGCM_SPEC.create_processor(SERDE_TYPE, opts)


AESGCM_SPEC = SerdeSpec(
    pair_factory=create_aesgcm_pair,
    description="AES-GCM encryption at rest; frame v3 binds each frame to its object key and "
    "names its key id, v1 is LMCache's frame",
    options=OPTIONS,
    size_contract=SerdeSizeContract.EXACT,
    lossy=False,
    # not CIPHERTEXT: a chain encrypts once, in its last stage ([aesgcm, aesgcm] is refused)
    consumes=frozenset({DataKind.KV_TENSORS, DataKind.BYTES}),
    produces=DataKind.CIPHERTEXT,
    consumes_hint="aesgcm encrypts once, as the last stage of a chain (e.g. [fp8, aesgcm]).",
    format_version=1,
)
